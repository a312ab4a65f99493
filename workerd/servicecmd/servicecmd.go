// Package servicecmd is `workerd service`: it installs workerd as a
// per-user service that starts at login, restarts on failure and drains
// in-flight jobs when stopped, and removes it again.
//
//	workerd service install   [--home DIR] [--dry-run]
//	workerd service uninstall [--dry-run]
//	workerd service status
//
// On Linux the service is a systemd user unit, on macOS a launchd agent;
// other systems get an error that says so. The service runs
// `workerd run --home DIR` with the C0MPUTE_* variables set at install
// time (and OLLAMA_HOST, which picks Ollama's address); everything else
// comes from DIR/workerd.json, as for `workerd run`. Install loads that
// configuration first, so a service that would fail at start is never
// installed. Secrets (the worker token, the backend API key) are never
// written where another user can read them: they are left out when
// workerd.json already holds them, and otherwise go to a file only the
// user can read.
package servicecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

// Exit codes.
const (
	// ExitOK: installed, uninstalled (or nothing to uninstall), or
	// status found the service running.
	ExitOK = 0
	// ExitFailed: the configuration does not load, this system has no
	// supported service manager, or a file or command failed.
	ExitFailed = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 2
	// ExitNotRunning: status found the service not installed, or
	// installed but not running (as `systemctl status` uses 3).
	ExitNotRunning = 3
)

// Timing. drainTimeout mirrors workerd/agent's drainTimeout (a test reads
// that constant from the agent's source and fails if they part); the
// service manager must wait longer than the drain before it kills.
const (
	// drainTimeout is how long `workerd run` lets in-flight jobs finish
	// after SIGTERM.
	drainTimeout = 5 * time.Minute
	// stopTimeout is how long systemd (TimeoutStopSec) and launchd
	// (ExitTimeOut) wait after SIGTERM before SIGKILL: the drain, plus a
	// minute to close connections and the backend.
	stopTimeout = drainTimeout + time.Minute
	// restartDelay is the wait before a failed workerd is started again.
	restartDelay = 10 * time.Second
	// commandTimeout bounds one systemctl/launchctl call; stopping waits
	// for the drain, so it is longer than stopTimeout.
	commandTimeout = stopTimeout + time.Minute
)

const usage = `usage:
  workerd service install   [--home DIR] [--dry-run]
  workerd service uninstall [--dry-run]
  workerd service status

install runs workerd as a service of your user that starts at login, restarts
if it fails and drains in-flight jobs when stopped: a systemd user unit on
Linux (~/.config/systemd/user/workerd.service), a launchd agent on macOS
(~/Library/LaunchAgents/network.c0mpute.workerd.plist). The service runs
"workerd run --home DIR" (DIR: --home, $C0MPUTE_HOME, or ~/.c0mpute) with the
C0MPUTE_* variables and OLLAMA_HOST set now; other settings come from
DIR/workerd.json. The configuration is checked first, as "workerd run" would
load it. The worker token and backend key are left out when workerd.json has
them, and otherwise kept in a file only you can read.

uninstall stops the service (after it drains), disables it and removes what
install wrote. status says whether the service is installed, enabled and
running, and where its unit file and logs are. --dry-run prints the files and
the commands instead of writing and running them.

exit codes: 0 done (status: running), 1 failed, 2 usage,
            3 status: not installed or not running`

// Env is what Main reads from outside its arguments. A nil field is the
// process's own: os.Getenv, os.Environ, runtime.GOOS, os.Executable,
// os.Getuid, ExecRunner.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads HOME, USER, XDG_CONFIG_HOME and C0MPUTE_HOME.
	Getenv func(string) string
	// Environ lists the environment, for the C0MPUTE_* variables the
	// service carries.
	Environ func() []string
	// GOOS picks the service manager: "linux" (systemd) or "darwin"
	// (launchd).
	GOOS string
	// Executable is the running binary, which the service runs.
	Executable func() (string, error)
	// Getuid is the user id, for launchd's gui/<uid> domain.
	Getuid func() int
	// Runner runs systemctl and launchctl.
	Runner Runner
}

func (e *Env) defaults() {
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Environ == nil {
		e.Environ = os.Environ
	}
	if e.GOOS == "" {
		e.GOOS = runtime.GOOS
	}
	if e.Executable == nil {
		e.Executable = os.Executable
	}
	if e.Getuid == nil {
		e.Getuid = os.Getuid
	}
	if e.Runner == nil {
		e.Runner = ExecRunner{}
	}
}

// usageError is a bad flag or argument: Main prints the usage after it.
type usageError struct{ error }

// Main runs `workerd service <args>` and returns the exit code.
func Main(args []string, env Env) int {
	env.defaults()
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, "workerd service: a command is required: install, uninstall or status")
		fmt.Fprintln(env.Stderr, usage)
		return ExitUsage
	}
	ctx := context.Background()
	var code int
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "install", "uninstall", "status":
		var o options
		o, err = parseFlags(cmd, rest)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(env.Stdout, usage)
			return ExitOK
		}
		if err == nil {
			code, err = dispatch(ctx, cmd, o, env)
		}
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(env.Stdout, usage)
		return ExitOK
	default:
		err = usageError{fmt.Errorf("unknown command %q: the commands are install, uninstall and status", cmd)}
	}
	if err == nil {
		return code
	}
	fmt.Fprintln(env.Stderr, "workerd service:", err)
	if _, ok := err.(usageError); ok {
		fmt.Fprintln(env.Stderr, usage)
		return ExitUsage
	}
	return ExitFailed
}

// options are a command's flags.
type options struct {
	home   string
	dryRun bool
}

func parseFlags(cmd string, args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("workerd service "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if cmd == "install" {
		fs.StringVar(&o.home, "home", "", "state folder")
	}
	if cmd != "status" {
		fs.BoolVar(&o.dryRun, "dry-run", false, "print, do not write or run")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{fmt.Errorf("%s: %v", cmd, err)}
	}
	if fs.NArg() > 0 {
		more := ""
		if cmd == "install" {
			more = "; settings other than --home come from C0MPUTE_* variables or <home>/workerd.json"
		}
		return o, usageError{fmt.Errorf("%s: unexpected argument %q%s", cmd, fs.Arg(0), more)}
	}
	return o, nil
}

func dispatch(ctx context.Context, cmd string, o options, env Env) (int, error) {
	m, err := newManager(env)
	if err != nil {
		return ExitFailed, fmt.Errorf("%s: %w", cmd, err)
	}
	switch cmd {
	case "install":
		return install(ctx, m, o, env)
	case "uninstall":
		return uninstall(ctx, m, o, env)
	}
	return m.status(ctx, env.Stdout)
}

// manager is one service manager: systemd (user units) or launchd
// (agents).
type manager interface {
	// file is where the unit or plist lives.
	file() string
	// installPlan renders the service for s and lists the steps that
	// install it; existed says a previous install is being replaced.
	installPlan(s service, existed bool) (plan, error)
	// uninstallPlan lists the steps that stop and remove an installed
	// service.
	uninstallPlan() (plan, error)
	// status prints the state and returns the exit code.
	status(ctx context.Context, w io.Writer) (int, error)
	// installed is what install prints once done.
	installed(w io.Writer, s service)
}

func newManager(env Env) (manager, error) {
	userHome := env.Getenv("HOME")
	if userHome == "" || !filepath.IsAbs(userHome) {
		return nil, fmt.Errorf("HOME is %q: want your home folder's absolute path, where the service file goes", userHome)
	}
	switch env.GOOS {
	case "linux":
		dir := env.Getenv("XDG_CONFIG_HOME")
		if !filepath.IsAbs(dir) { // unset, or relative, which the spec says to ignore
			dir = filepath.Join(userHome, ".config")
		}
		return &systemd{unit: filepath.Join(dir, "systemd", "user", unitName), run: env.Runner, user: env.Getenv("USER")}, nil
	case "darwin":
		return &launchd{plist: filepath.Join(userHome, "Library", "LaunchAgents", label+".plist"), run: env.Runner, uid: env.Getuid()}, nil
	}
	return nil, fmt.Errorf("this system is %s: workerd service supports Linux (systemd user units) and macOS (launchd agents); elsewhere, have your service manager run %q and stop it with SIGTERM", env.GOOS, "workerd run")
}

// service is what install puts in the unit or plist.
type service struct {
	// Exe is the absolute path of the workerd binary, links resolved.
	Exe string
	// Home is the state folder, absolute.
	Home string
	// Env is the environment the service runs with, sorted by name.
	Env []variable
	// Notes say what install did with the environment (a secret left
	// out, a path made absolute).
	Notes []string
}

// Args is the service's command line.
func (s service) Args() []string { return []string{s.Exe, "run", "--home", s.Home} }

// Public is the variables that may sit in a file anyone can read.
func (s service) Public() []variable {
	return slices.DeleteFunc(slices.Clone(s.Env), func(v variable) bool { return v.Secret })
}

// Secrets is the variables only the user may read.
func (s service) Secrets() []variable {
	return slices.DeleteFunc(slices.Clone(s.Env), func(v variable) bool { return !v.Secret })
}

// variable is one environment variable the service carries.
type variable struct {
	Name, Value string
	// Secret keeps it out of world-readable files and dry-run output.
	Secret bool
}

// pathVars hold file paths: the service runs in another working folder,
// so a relative one is made absolute against the folder install ran in.
var pathVars = []string{config.EnvKeyFile, config.EnvGGUF}

// secretVars are the settings that are credentials. Beyond these, a
// variable whose name says it holds a credential is treated as one.
var secretVars = []string{config.EnvToken, config.EnvBackendKey}

func isSecret(name string) bool {
	if slices.Contains(secretVars, name) {
		return true
	}
	for _, w := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSPHRASE", "API_KEY", "PRIVATE"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// newService resolves the binary and the state folder, collects the
// environment to carry and checks that `workerd run --home <home>` loads
// its configuration and key with it.
func newService(o options, env Env) (service, error) {
	exe, err := env.Executable()
	if err != nil {
		return service{}, fmt.Errorf("cannot find the workerd binary to run: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return service{}, fmt.Errorf("the workerd binary: %w", err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return service{}, fmt.Errorf("the workerd binary: %w", err)
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return service{}, fmt.Errorf("the workerd binary %s is a temporary `go run` build that will be deleted: build or install workerd (go build ./workerd) and run install from that binary", exe)
	}
	s := service{Exe: exe}
	home := o.home
	if home == "" {
		home = env.Getenv(config.EnvHome)
	}
	if home == "" {
		home = filepath.Join(env.Getenv("HOME"), ".c0mpute")
	}
	if s.Home, err = filepath.Abs(home); err != nil {
		return service{}, fmt.Errorf("--home %s: %w", home, err)
	}

	for _, kv := range env.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if !(strings.HasPrefix(name, "C0MPUTE_") || name == config.EnvOllamaHost) || name == config.EnvHome {
			continue
		}
		if err := checkVariable(name, value); err != nil {
			return service{}, err
		}
		if value == "" {
			continue // unset in effect: config ignores empty values
		}
		if slices.Contains(pathVars, name) && !filepath.IsAbs(value) {
			abs, err := filepath.Abs(value)
			if err != nil {
				return service{}, fmt.Errorf("%s=%s: %w", name, value, err)
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s=%s is relative: the service gets %s", name, value, abs))
			value = abs
		}
		s.Env = append(s.Env, variable{Name: name, Value: value, Secret: isSecret(name)})
	}
	slices.SortFunc(s.Env, func(a, b variable) int { return strings.Compare(a.Name, b.Name) })

	args := []string{"--home", s.Home}
	cfg, err := config.Load(args, lookup(s.Env))
	if err != nil {
		return service{}, fmt.Errorf("the configuration does not load, so the service would fail at start:\n%v\nfix it (check with: workerd run --home %s), then install again", err, s.Home)
	}
	// A credential workerd.json already holds stays out of the service
	// files: dropping it must leave the configuration as it is.
	for _, name := range secretVars {
		i := slices.IndexFunc(s.Env, func(v variable) bool { return v.Name == name })
		if i < 0 {
			continue
		}
		without := slices.Delete(slices.Clone(s.Env), i, i+1)
		if c, err := config.Load(args, lookup(without)); err == nil && reflect.DeepEqual(c, cfg) {
			s.Env = without
			s.Notes = append(s.Notes, fmt.Sprintf("%s is not carried: %s holds the same value", name, filepath.Join(s.Home, "workerd.json")))
		}
	}
	keyFile := cfg.KeyFile
	if !filepath.IsAbs(keyFile) {
		keyFile = filepath.Join(s.Home, keyFile) // the service's working folder
	}
	if _, err := identity.Load(keyFile); err != nil {
		return service{}, fmt.Errorf("the service would fail at start: %w", err)
	}
	if cfg.Backend == "builtin" {
		gguf := cfg.GGUF
		if !filepath.IsAbs(gguf) {
			gguf = filepath.Join(s.Home, gguf)
		}
		if _, err := os.Stat(gguf); err != nil {
			return service{}, fmt.Errorf("the service would fail at start: the builtin backend's model file: %w", err)
		}
	}
	return s, nil
}

// checkVariable refuses what a service file cannot carry: systemd takes
// names of letters, digits and underscores, and rejects non-printable
// characters in values.
func checkVariable(name, value string) error {
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return fmt.Errorf("environment variable %q: a service can only carry names of letters, digits and _; unset it, then install again", name)
		}
	}
	if err := printable(value); err != nil {
		return fmt.Errorf("%s %w: set it without control characters, then install again", name, err)
	}
	return nil
}

// printable refuses invalid UTF-8 and control characters, which neither a
// systemd unit nor a launchd plist can hold.
func printable(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("holds the control character %U", r)
		}
	}
	return nil
}

func lookup(vars []variable) func(string) string {
	return func(name string) string {
		for _, v := range vars {
			if v.Name == name {
				return v.Value
			}
		}
		return ""
	}
}

func install(ctx context.Context, m manager, o options, env Env) (int, error) {
	s, err := newService(o, env)
	if err != nil {
		return ExitFailed, fmt.Errorf("install: %w", err)
	}
	_, err = os.Stat(m.file())
	existed := err == nil
	p, err := m.installPlan(s, existed)
	if err != nil {
		return ExitFailed, fmt.Errorf("install: %w", err)
	}
	for _, n := range s.Notes {
		fmt.Fprintln(env.Stdout, "note:", n)
	}
	if o.dryRun {
		p.print(env.Stdout)
		return ExitOK, nil
	}
	if err := p.run(ctx, env.Stdout); err != nil {
		return ExitFailed, fmt.Errorf("install: %w", err)
	}
	m.installed(env.Stdout, s)
	return ExitOK, nil
}

func uninstall(ctx context.Context, m manager, o options, env Env) (int, error) {
	if _, err := os.Stat(m.file()); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(env.Stdout, "workerd service is not installed (no %s): nothing to do\n", m.file())
		return ExitOK, nil
	} else if err != nil {
		return ExitFailed, fmt.Errorf("uninstall: %w", err)
	}
	p, err := m.uninstallPlan()
	if err != nil {
		return ExitFailed, fmt.Errorf("uninstall: %w", err)
	}
	if o.dryRun {
		p.print(env.Stdout)
		return ExitOK, nil
	}
	fmt.Fprintf(env.Stdout, "stopping workerd: it finishes in-flight jobs first, for up to %s\n", drainTimeout)
	if err := p.run(ctx, env.Stdout); err != nil {
		return ExitFailed, fmt.Errorf("uninstall: %w", err)
	}
	fmt.Fprintln(env.Stdout, "workerd service uninstalled")
	return ExitOK, nil
}
