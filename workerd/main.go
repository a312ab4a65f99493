// Command workerd is the c0mpute contributor daemon: it connects a local
// inference server (Ollama, any OpenAI-compatible server, or its own
// built-in GGUF engine) to the network over the relay and serves jobs for
// USDC.
//
//	workerd setup [--model ID] [--yes] [run flags]
//	                                         detect hardware, pull, tune and benchmark a model, write workerd.json
//	workerd init [--home DIR] [--key-file FILE] [FILE]
//	                                         create the identity keypair
//	workerd [run] [flags]                    connect and serve until SIGINT/SIGTERM
//	workerd doctor [--json] [--skip-bench] [run flags]
//	                                         check the set-up, one line per check with its fix
//	workerd service install|uninstall|status [--dry-run]
//	                                         run as a systemd user unit or launchd agent
//	workerd earnings [--json]                what the account's workers earned, were paid, are owed
//	workerd shard publish|plan|accept|verify|sign    sharded-ring tools (functions/shard/README.md)
//	workerd version | --version
//	workerd help | --help
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/backend/comfyui"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/backend/openaicompat"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/doctor"
	"github.com/c0mpute/c0mpute/workerd/earningscmd"
	"github.com/c0mpute/c0mpute/workerd/identity"
	"github.com/c0mpute/c0mpute/workerd/metrics"
	"github.com/c0mpute/c0mpute/workerd/ringmember"
	"github.com/c0mpute/c0mpute/workerd/servicecmd"
	"github.com/c0mpute/c0mpute/workerd/setup"
	"github.com/c0mpute/c0mpute/workerd/shardcmd"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		if code, ok := subcommand(os.Args[1], os.Args[2:]); ok {
			os.Exit(code)
		}
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "workerd:", err)
		os.Exit(1)
	}
}

// subcommand runs the commands that live in packages of their own, and
// reports whether name is one.
func subcommand(name string, args []string) (code int, ok bool) {
	switch name {
	case "shard":
		return shardcmd.Main(args, shardcmd.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}), true
	case "doctor":
		return doctor.Main(args, doctor.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}), true
	case "service":
		return servicecmd.Main(args, servicecmd.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}), true
	case "setup":
		return setup.Main(args, setup.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}), true
	case "earnings":
		return earningscmd.Main(args, earningscmd.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}), true
	}
	return 0, false
}

// usage is `workerd --help`.
const usage = `usage: workerd [COMMAND] [flags]

commands:
  run      connect to the relay and serve jobs until SIGINT or SIGTERM (the default)
  setup    detect GPUs, pick an under-served model that fits, pull and tune it, benchmark, write workerd.json
  init     create the identity keypair (workerd init --help)
  doctor   check the configuration, identity, relay, clock, token, backend and models, with fixes
  service  run workerd as a user service: install, uninstall, status (systemd or launchd)
  earnings what this account's workers earned, were paid and are owed (--json)
  shard    sharded-ring tools: publish, plan, accept, verify, sign (workerd shard --help)
  version  print the version (also --version)
  help     this text (also -h, --help)

run flags (each also comes from an environment variable, or a key in <home>/workerd.json):
`

func run(args []string) error {
	cmd := "run"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "init" || a == "run" || a == "version" || a == "help":
			cmd, args = a, args[1:]
		case a == "--version" || a == "-version":
			cmd = "version"
		case !strings.HasPrefix(a, "-"):
			return fmt.Errorf("unknown command %q: the commands are run, setup, init, doctor, service, earnings, shard, version and help (workerd --help)", a)
		}
	}
	switch cmd {
	case "version":
		fmt.Println("workerd", version)
		return nil
	case "help":
		fmt.Print(usage + config.FlagUsage())
		return nil
	case "init":
		return initKey(args)
	}
	cfg, err := config.Load(args, os.Getenv)
	if errors.Is(err, config.ErrHelp) {
		fmt.Print(usage + config.FlagUsage())
		return nil
	}
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	key, err := identity.Load(cfg.KeyFile)
	if err != nil {
		return err
	}
	be, closeBackend, err := newBackend(cfg, log)
	if err != nil {
		return err
	}
	defer closeBackend()
	log.Info("workerd starting", "version", version, "wallet", identity.Address(key), "relay", cfg.RelayURL,
		"backend", cfg.Backend, "backend_url", cfg.BackendURL, "gguf", cfg.GGUF)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var obs agent.Observer
	var served *metrics.Observer
	if cfg.MetricsAddr != "" {
		m, err := metrics.Serve(ctx, cfg.MetricsAddr, log)
		if err != nil {
			return err
		}
		obs, served = m, m
	}
	acfg := agent.Config{RelayURL: cfg.RelayURL, Token: cfg.Token, Key: key, Backend: be,
		Models: cfg.Models, Log: log, Version: version, Observer: obs}
	if cfg.Shard {
		member, err := ringmember.NewMember(ringmember.MemberConfig{Key: key, Dir: filepath.Join(cfg.Home, "rings"),
			Memory: cfg.ShardMemory, Listen: cfg.ShardListen, Advertise: cfg.ShardAdvertise, Uplink: cfg.ShardUplink,
			Draft: cfg.Draft, Log: log})
		if err != nil {
			return fmt.Errorf("ring member: %w", err)
		}
		defer member.Close()
		if served != nil {
			if err := served.RegisterSpeculation(member.SpecStats()); err != nil {
				return fmt.Errorf("ring member: %w", err)
			}
		}
		log.Info("ring member: stage listener up", "listen", member.Addr(), "advertise", member.Advertise(), "memory", cfg.ShardMemory,
			"draft", cmp.Or(cfg.DraftSpec, speculate.ModeLookup))
		acfg.Ring = member
	}
	a := agent.New(acfg)
	err = a.Run(ctx)
	log.Info("workerd stopped")
	return err
}

// newBackend builds the inference backend cfg names, and what closes it.
func newBackend(cfg config.Config, log *slog.Logger) (backend.Backend, func(), error) {
	switch cfg.Backend {
	case "ollama":
		return ollama.New(cfg.BackendURL), func() {}, nil
	case builtin.Name:
		if cfg.GGUF == "" {
			// A ring member only (--shard): its layers are the ring's.
			return ringOnly{}, func() {}, nil
		}
		b, err := builtin.New(cfg.GGUF, builtin.WithLogger(log))
		if err != nil {
			return nil, nil, err
		}
		return b, func() { b.Close() }, nil
	case "comfyui":
		var opts []comfyui.Option
		if cfg.Workflow != "" {
			wf, err := comfyui.LoadWorkflow(cfg.Workflow)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, comfyui.WithWorkflow(wf))
		}
		b, err := comfyui.New(cfg.BackendURL, opts...)
		if err != nil {
			return nil, nil, err
		}
		return b, func() {}, nil
	default:
		opts := []openaicompat.Option{openaicompat.WithAPIKey(cfg.BackendKey)}
		if cfg.DeveloperRole {
			opts = append(opts, openaicompat.WithDeveloperRole())
		}
		if len(cfg.ImageModels) > 0 {
			opts = append(opts, openaicompat.WithImageModels(cfg.ImageModels...))
		}
		return openaicompat.New(cfg.BackendURL, opts...), func() {}, nil
	}
}

// ringOnly is the backend of a worker that serves ring stages and no
// whole model (--backend builtin --shard without --gguf).
type ringOnly struct{}

func (ringOnly) Name() string                             { return builtin.Name }
func (ringOnly) Models(context.Context) ([]string, error) { return nil, nil }
func (ringOnly) Chat(context.Context, string, *oaiwire.ChatRequest, func(oaiwire.Delta) error) (backend.Result, error) {
	return backend.Result{}, errors.New("workerd: this worker serves ring stages only, no whole model")
}

// initUsage is `workerd init --help`.
const initUsage = `usage: workerd init [--home DIR] [--key-file FILE] [FILE]

Creates the worker's identity keypair (a Solana keypair file) at FILE, or
--key-file, or $C0MPUTE_WORKER_KEY, or DIR/worker-key.json (DIR: --home,
$C0MPUTE_HOME, or ~/.c0mpute). An existing file is kept, never overwritten.
`

func initKey(args []string) error {
	fs := flag.NewFlagSet("workerd init", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	homeFlag := fs.String("home", "", "")
	keyFlag := fs.String("key-file", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(initUsage)
			return nil
		}
		return fmt.Errorf("init: %v\n%s", err, initUsage)
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("init: one key file at most, not %q\n%s", fs.Args(), initUsage)
	}
	home := *homeFlag
	if home == "" {
		home = os.Getenv(config.EnvHome)
	}
	if home == "" {
		home = config.DefaultHome()
	}
	path := *keyFlag
	if path == "" {
		path = os.Getenv(config.EnvKeyFile)
	}
	if fs.NArg() == 1 {
		path = fs.Arg(0)
	}
	if path == "" {
		path = filepath.Join(home, "worker-key.json")
	}
	key, err := identity.Create(path)
	if errors.Is(err, identity.ErrExists) {
		existing, lerr := identity.Load(path)
		if lerr != nil {
			return lerr
		}
		fmt.Printf("identity already exists: %s\nidentity: %s\n%s", path, identity.Address(existing), payoutNote)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("created identity %s\nidentity: %s\n%skeep this file secret: whoever holds it works as your worker, on its reputation\n",
		path, identity.Address(key), payoutNote)
	return nil
}

// payoutNote is what init says of payouts, as the keeper pays them: to the
// account's payout wallet, never to an identity the owner did not prove.
const payoutNote = `earnings are paid to your account's payout wallet: the wallet you signed in with,
or one you prove by signing with it (this file too: c0mpute-wallet -key FILE payout-wallet);
GET /v1/earnings shows which
`
