package servicecmd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
)

// unitName is the systemd user unit.
const unitName = "workerd.service"

// envFileName is the file, in the state folder, that holds the secrets the
// unit cannot: only the user can read it.
const envFileName = "workerd.service.env"

// systemd installs workerd as a systemd user unit, driven by
// `systemctl --user`.
type systemd struct {
	unit string
	run  Runner
	user string
}

func (d *systemd) file() string { return d.unit }

func systemctl(args ...string) []string { return append([]string{"systemctl", "--user"}, args...) }

// unitTemplate is the unit. Every value goes through a quoting function:
// see systemd.syntax(7) "Quoting" and systemd.service(5) "Command lines".
var unitTemplate = template.Must(template.New("unit").Funcs(template.FuncMap{
	"exec": execLine, "env": envAssignment, "path": unitPath,
}).Parse(`# workerd, the c0mpute contributor daemon, as a systemd user service.
# Written by "workerd service install"; "workerd service uninstall" removes it.
# To change settings, edit workerd.json in the state folder and restart, or
# install again.
[Unit]
Description=c0mpute workerd (contributor daemon)
# Restart=on-failure gives up after 10 failed starts in 10 minutes: a
# refused token or a broken configuration does not mend itself.
StartLimitIntervalSec=600
StartLimitBurst=10

[Service]
Type=exec
ExecStart={{exec .Args}}
WorkingDirectory={{path .Home}}
{{- range .Public}}
Environment={{env .Name .Value}}
{{- end}}
{{- with .EnvFile}}
EnvironmentFile={{path .}}
{{- end}}
Restart=on-failure
RestartSec={{.RestartSec}}
# On stop workerd takes no new jobs and lets running ones finish, for up to
# {{.Drain}}; systemd waits longer than that before SIGKILL. SIGTERM goes to
# workerd alone; helpers it started are killed once it has exited.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec={{.StopSec}}

[Install]
WantedBy=default.target
`))

// unitData is what unitTemplate reads.
type unitData struct {
	service
	EnvFile    string
	RestartSec int
	StopSec    int
	Drain      string
}

// renderUnit is the unit for s; envFile is the secrets file, "" if none.
func renderUnit(s service, envFile string) ([]byte, error) {
	var b bytes.Buffer
	err := unitTemplate.Execute(&b, unitData{service: s, EnvFile: envFile,
		RestartSec: int(restartDelay.Seconds()), StopSec: int(stopTimeout.Seconds()), Drain: drainTimeout.String()})
	if err != nil {
		return nil, templateError("the unit", err)
	}
	return b.Bytes(), nil
}

// quoteWord is one word in systemd's quoting: in double quotes, with
// backslash and double quote escaped and % doubled (a specifier
// otherwise); in command lines $ is doubled too (a variable otherwise).
// Control characters cannot be carried: systemd rejects them.
func quoteWord(s string, inCommand bool) (string, error) {
	if err := printable(s); err != nil {
		return "", valueError{fmt.Errorf("%q %w, which a systemd unit cannot carry", s, err)}
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `%`, `%%`)
	if inCommand {
		r = strings.NewReplacer(`\`, `\\`, `"`, `\"`, `%`, `%%`, `$`, `$$`)
	}
	return `"` + r.Replace(s) + `"`, nil
}

// execLine is ExecStart='s value: each argument a quoted word.
func execLine(args []string) (string, error) {
	words := make([]string, len(args))
	for i, a := range args {
		w, err := quoteWord(a, true)
		if err != nil {
			return "", err
		}
		words[i] = w
	}
	return strings.Join(words, " "), nil
}

// envAssignment is Environment='s value: the whole NAME=value quoted, so
// spaces and = in the value stay in it.
func envAssignment(name, value string) (string, error) {
	return quoteWord(name+"="+value, false)
}

// unitPath is a path setting's value (WorkingDirectory=,
// EnvironmentFile=): these take the rest of the line as it is, so only %
// is escaped; leading or trailing spaces would be trimmed, so they are
// refused.
func unitPath(p string) (string, error) {
	if err := printable(p); err != nil {
		return "", valueError{fmt.Errorf("path %q %w, which a systemd unit cannot carry", p, err)}
	}
	if strings.TrimSpace(p) != p {
		return "", valueError{fmt.Errorf("path %q starts or ends with a space, which a systemd unit cannot carry; choose another --home", p)}
	}
	return strings.ReplaceAll(p, "%", "%%"), nil
}

// envFileLine is one NAME=value line of an EnvironmentFile=: the value in
// single quotes, which it reads verbatim, unless it holds one; then in
// double quotes with \ " ` $ escaped (systemd.exec(5) EnvironmentFile=).
func envFileLine(name, value string) string {
	if !strings.Contains(value, "'") {
		return name + "='" + value + "'"
	}
	return name + `="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "`", "\\`", `$`, `\$`).Replace(value) + `"`
}

func envFile(vars []variable, hide bool) []byte {
	var b bytes.Buffer
	b.WriteString("# Secrets for workerd.service, readable only by you. Written by\n# \"workerd service install\"; \"workerd service uninstall\" removes it.\n")
	for _, v := range vars {
		if hide {
			fmt.Fprintf(&b, "%s=%s\n", v.Name, hidden)
		} else {
			fmt.Fprintln(&b, envFileLine(v.Name, v.Value))
		}
	}
	return b.Bytes()
}

func (d *systemd) installPlan(s service, existed bool) (plan, error) {
	p := plan{runner: d.run}
	if _, err := os.Stat(s.Home); errors.Is(err, fs.ErrNotExist) {
		p.steps = append(p.steps, step{mkdir: s.Home})
	}
	envPath := ""
	if len(s.Secrets()) > 0 {
		envPath = filepath.Join(s.Home, envFileName)
	}
	unit, err := renderUnit(s, envPath)
	if err != nil {
		return plan{}, err
	}
	p.steps = append(p.steps, step{write: &fileOut{path: d.unit, mode: 0o644, content: unit, shown: unit}})
	if envPath != "" {
		p.steps = append(p.steps, step{write: &fileOut{path: envPath, mode: 0o600,
			content: envFile(s.Secrets(), false), shown: envFile(s.Secrets(), true)}, note: "secret values hidden here"})
	} else if old := d.installedEnvFile(); old != "" {
		p.steps = append(p.steps, step{remove: old, note: "the new unit needs no secrets file"})
	}
	p.steps = append(p.steps, step{cmd: systemctl("daemon-reload")}, step{cmd: systemctl("enable", "--now", unitName)})
	if existed {
		// enable --now leaves a running service on its old unit.
		p.steps = append(p.steps, step{cmd: systemctl("restart", unitName), note: "it was installed already: restart it on the new unit"})
	}
	return p, nil
}

// installedEnvFile is the EnvironmentFile= of the installed unit, "" if
// there is none.
func (d *systemd) installedEnvFile() string {
	f, err := os.Open(d.unit)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "EnvironmentFile="); ok {
			return strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(v), "-"), "%%", "%")
		}
	}
	return ""
}

func (d *systemd) uninstallPlan() (plan, error) {
	p := plan{runner: d.run}
	p.steps = append(p.steps, step{cmd: systemctl("disable", "--now", unitName), note: "stops it: running jobs finish first"},
		step{remove: d.unit})
	if env := d.installedEnvFile(); env != "" {
		p.steps = append(p.steps, step{remove: env})
	}
	p.steps = append(p.steps, step{cmd: systemctl("daemon-reload")})
	return p, nil
}

func (d *systemd) installed(w io.Writer, s service) {
	if len(s.Secrets()) > 0 {
		names := make([]string, 0, len(s.Secrets()))
		for _, v := range s.Secrets() {
			names = append(names, v.Name)
		}
		fmt.Fprintf(w, "%s is only in your environment, not in %s: it is kept in %s, which only you can read, not in the unit\n",
			strings.Join(names, ", "), filepath.Join(s.Home, "workerd.json"), filepath.Join(s.Home, envFileName))
	}
	user := d.user
	if user == "" {
		user = "$USER"
	}
	fmt.Fprintf(w, `workerd is installed and running as the systemd user service %s.
To keep it running while you are logged out (and start it at boot):
  loginctl enable-linger %s
Logs:   journalctl --user -u %s -f
Status: workerd service status
`, unitName, user, unitName)
}

// showProperties are what status asks systemctl show for.
var showProperties = []string{"LoadState", "UnitFileState", "ActiveState", "SubState", "MainPID", "NRestarts"}

func (d *systemd) status(ctx context.Context, w io.Writer) (int, error) {
	if _, err := os.Stat(d.unit); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(w, "installed: no (no %s; workerd service install installs it)\n", d.unit)
		return ExitNotRunning, nil
	}
	fmt.Fprintf(w, "installed: yes\nunit file: %s\n", d.unit)
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := systemctl("show", unitName, "--property="+strings.Join(showProperties, ","))
	res, err := d.run.Run(ctx, cmd[0], cmd[1:]...)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%s failed (exit status %d): %s", shellQuote(cmd), res.ExitCode, outputText(res))
	}
	if err != nil {
		return ExitFailed, fmt.Errorf("status: %w (systemctl --user needs your login session: run this in a shell you logged in to, not under sudo or su)", err)
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(res.Output), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	for _, k := range showProperties {
		if _, ok := props[k]; !ok {
			return ExitFailed, fmt.Errorf("status: %s did not report %s: %s", shellQuote(cmd), k, outputText(res))
		}
	}
	fmt.Fprintf(w, "enabled:   %s\n", props["UnitFileState"])
	running := props["ActiveState"] == "active"
	if running {
		pid, _ := strconv.Atoi(props["MainPID"])
		fmt.Fprintf(w, "running:   yes (%s/%s), main PID %d, %s restarts\n", props["ActiveState"], props["SubState"], pid, props["NRestarts"])
	} else {
		fmt.Fprintf(w, "running:   no (%s/%s, unit %s)\n", props["ActiveState"], props["SubState"], props["LoadState"])
	}
	fmt.Fprintf(w, "logs:      journalctl --user -u %s\n", unitName)
	if !running {
		return ExitNotRunning, nil
	}
	return ExitOK, nil
}
