// Package setup is `workerd setup`: from nothing to a tuned, benchmarked,
// configured worker in one command.
//
//	workerd setup [--model ID] [--yes] [--no-bench] [run flags: --relay, --token, --backend-url, --api-url, --home, …]
//
// It detects the machine's GPUs (workerd/hardware), asks the gateway what
// the network is short of (GET /v1/stats) and what each model needs (GET
// /v1/models: the Ollama model that serves it and its memory), ranks the
// models that fit, pulls the chosen one through Ollama, creates a tuned
// copy whose num_ctx fills the memory the weights leave, benchmarks it
// (workerd/bench), writes workerd.json and prints the command to start.
package setup

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/bench"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/hardware"
)

// Exit codes.
const (
	// ExitOK: the worker is set up (workerd.json written).
	ExitOK = 0
	// ExitFailed: the gateway, Ollama or the benchmark failed; the
	// message says which and why.
	ExitFailed = 1
	// ExitUsage: bad flags or settings, or no answer to a question.
	ExitUsage = 2
	// ExitNoFit: no model of the network fits this machine, or the one
	// asked for does not.
	ExitNoFit = 3
)

const usage = `usage: workerd setup [--model ID] [--yes] [--no-bench] [--name NAME] [--insecure] [run flags]

setup detects this machine's GPUs, asks the network (--api-url) which models
it is short of, pulls the chosen one through Ollama (--backend-url), creates a
tuned copy whose context fills the memory the weights leave, benchmarks it,
and writes workerd.json in --home. Without --model or --yes it lists the
models that fit, most needed first, and asks on standard input.`

// Env is what Main reads from outside its arguments.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (settings as for workerd run).
	Getenv func(string) string
	// Detect finds the hardware; nil runs hardware.Detect on this
	// machine.
	Detect func(context.Context) (hardware.Report, error)
	// Runner runs the tools that read Ollama's server settings
	// (systemctl, launchctl); nil is hardware.Exec.
	Runner hardware.Runner
	// GOOS is runtime.GOOS unless set.
	GOOS string
	// HTTP is the client for the gateway and Ollama; nil is a plain one.
	HTTP *http.Client
	// Terminal says standard output is a terminal (progress bars); nil
	// tests Stdout.
	Terminal func() bool
}

func (e *Env) defaults() {
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.Stdin == nil {
		e.Stdin = strings.NewReader("")
	}
	if e.GOOS == "" {
		e.GOOS = runtime.GOOS
	}
	if e.Runner == nil {
		e.Runner = hardware.Exec{}
	}
	if e.Detect == nil {
		r, goos := e.Runner, e.GOOS
		e.Detect = func(ctx context.Context) (hardware.Report, error) {
			return hardware.Detect(ctx, r, hardware.System{GOOS: goos, NumCPU: runtime.NumCPU(), ReadFile: os.ReadFile})
		}
	}
	if e.HTTP == nil {
		e.HTTP = &http.Client{}
	}
	if e.Terminal == nil {
		e.Terminal = func() bool {
			f, ok := e.Stdout.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		}
	}
}

// options are setup's own flags.
type options struct {
	model, name  string
	yes, noBench bool
	insecure     bool
	benchTokens  int
	runArgs      []string
}

func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("workerd setup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.model, "model", "", "network model id to set up (default: ask, or with --yes the most needed that fits)")
	fs.BoolVar(&o.yes, "yes", false, "ask nothing: take the most needed model that fits")
	fs.BoolVar(&o.noBench, "no-bench", false, "skip the benchmark")
	fs.StringVar(&o.name, "name", "", "name of the tuned Ollama model (default c0mpute/<model id>)")
	fs.BoolVar(&o.insecure, "insecure", false, "let Ollama pull over plain HTTP (a registry of your own, for development)")
	fs.IntVar(&o.benchTokens, "bench-tokens", bench.DefaultMaxTokens, "tokens the benchmark generates (1 to 4096)")
	// The run command's settings, passed on to config.LoadForSetup.
	config.VisitFlags(func(f *flag.Flag, isBool bool) {
		pass := func(v string) error {
			o.runArgs = append(o.runArgs, "--"+f.Name+"="+v)
			return nil
		}
		if isBool {
			fs.BoolFunc(f.Name, f.Usage, pass)
		} else {
			fs.Func(f.Name, f.Usage, pass)
		}
	})
	return fs
}

// Usage is the help text: the usage, setup's own flags, and the run
// command's settings, which setup takes too.
func Usage() string {
	var b strings.Builder
	b.WriteString(usage + "\n\nflags:\n")
	fs := newFlagSet(&options{})
	own := flag.NewFlagSet("", flag.ContinueOnError)
	run := flag.NewFlagSet("", flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if runFlags[f.Name] {
			run.Var(f.Value, f.Name, f.Usage)
		} else {
			own.Var(f.Value, f.Name, f.Usage)
		}
	})
	own.SetOutput(&b)
	own.PrintDefaults()
	b.WriteString("\nsettings, as for workerd run (written to workerd.json):\n")
	run.SetOutput(&b)
	run.PrintDefaults()
	return b.String()
}

// runFlags are the run command's flag names.
var runFlags = func() map[string]bool {
	m := map[string]bool{}
	config.VisitFlags(func(f *flag.Flag, _ bool) { m[f.Name] = true })
	return m
}()

// usageError is a bad flag or setting: exit 2, with the usage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitError carries an exit code other than ExitFailed.
type exitError struct {
	code int
	error
}

func (e exitError) Unwrap() error { return e.error }

// Main runs `workerd setup <args>` and returns the exit code.
func Main(args []string, env Env) int {
	env.defaults()
	var o options
	fs := newFlagSet(&o)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(env.Stdout, Usage())
		return ExitOK
	case err != nil:
		return fail(env, usageError{err})
	case fs.NArg() > 0:
		return fail(env, usageError{fmt.Errorf("unexpected argument %q: setup takes only flags", fs.Arg(0))})
	case o.benchTokens < 1 || o.benchTokens > 4096:
		return fail(env, usageError{fmt.Errorf("--bench-tokens %d: want 1 to 4096", o.benchTokens)})
	}
	return fail(env, run(context.Background(), o, env))
}

func fail(env Env, err error) int {
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(env.Stderr, "workerd setup:", err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "%s\n(workerd setup --help lists the flags)\n", strings.SplitN(usage, "\n", 2)[0])
		return ExitUsage
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailed
}

// Bounds on the network calls that are not downloads.
const (
	gatewayTimeout = 30 * time.Second
	ollamaTimeout  = 2 * time.Minute
)

func run(ctx context.Context, o options, env Env) error {
	out := env.Stdout
	cfg, path, err := config.LoadForSetup(o.runArgs, env.Getenv)
	if err != nil {
		return usageError{err}
	}
	if cfg.Backend != "ollama" {
		return usageError{fmt.Errorf("--backend %s: setup sets up Ollama models; configure other backends by hand (workerd --help)", cfg.Backend)}
	}
	apiURL := cfg.APIURL
	if apiURL == "" {
		apiURL = DeriveAPIURL(cfg.RelayURL)
		if apiURL == "" {
			return usageError{fmt.Errorf("--api-url (or %s) is not set, and the relay URL %s does not name it: want the gateway's API base URL, http(s)://host/v1", config.EnvAPIURL, cfg.RelayURL)}
		}
	}

	// 1. Hardware.
	rep, err := env.Detect(ctx)
	if err != nil {
		return fmt.Errorf("detect the hardware: %w", err)
	}
	fmt.Fprintln(out, "Hardware:")
	for _, l := range strings.Split(rep.String(), "\n") {
		fmt.Fprintln(out, "  "+l)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(out, "  note: "+n)
	}

	// 2. What the network needs.
	gw := Gateway{Base: apiURL, HC: env.HTTP}
	gctx, cancel := context.WithTimeout(ctx, gatewayTimeout)
	stats, err := gw.Stats(gctx)
	if err == nil {
		var models []CatalogModel
		if models, err = gw.Models(gctx); err == nil {
			cancel()
			return setUp(ctx, o, env, cfg, path, apiURL, rep, stats, models)
		}
	}
	cancel()
	return fmt.Errorf("ask the network: %w", err)
}

func setUp(ctx context.Context, o options, env Env, cfg config.Config, path, apiURL string, rep hardware.Report, stats Stats, models []CatalogModel) error {
	out := env.Stdout
	fmt.Fprintf(out, "Network (%s): %d models, %d workers online, %d requests queued\n", apiURL, len(models), stats.WorkersOnline, stats.QueueDepth)

	// 3. Recommend and choose.
	mem := rep.TotalMiB()
	rec := Recommend(models, stats, mem)
	if len(rec.Ranked) > 0 {
		fmt.Fprintf(out, "Models that fit this machine (%s), most needed first:\n", hardware.GiB(mem))
		for i, c := range rec.Ranked {
			fmt.Fprintf(out, "  %2d. %-24s needs %-9s %d workers online, %d queued   (ollama %s)\n",
				i+1, c.ID, hardware.GiB(c.MemoryMiB), c.Workers, c.Queued, c.Ollama)
		}
	}
	for _, c := range rec.TooBig {
		fmt.Fprintf(out, "  does not fit: %s needs %s, this machine has %s\n", c.ID, hardware.GiB(c.MemoryMiB), hardware.GiB(mem))
	}
	if len(rec.NoOllama) > 0 {
		fmt.Fprintf(out, "  not offered to Ollama workers: %s\n", strings.Join(rec.NoOllama, ", "))
	}
	choice, err := choose(o, env, rec, models, mem)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Setting up %s (ollama %s)\n", choice.ID, choice.Ollama)

	// 4. Pull.
	ol := ollamaClient{base: cfg.BackendURL, hc: env.HTTP}
	vctx, cancel := context.WithTimeout(ctx, ollamaTimeout)
	defer cancel()
	version, err := ol.Version(vctx)
	if err != nil {
		return fmt.Errorf("Ollama does not answer at %s (%v): install it from https://ollama.com/download and start it, or set --backend-url", cfg.BackendURL, err)
	}
	fmt.Fprintf(out, "Pulling %s into Ollama %s at %s\n", choice.Ollama, version, cfg.BackendURL)
	pr := newProgress(out, env.Terminal())
	if err := ol.Pull(ctx, choice.Ollama, o.insecure, pr.update); err != nil {
		pr.finishBar()
		return fmt.Errorf("pull %s: %w", choice.Ollama, err)
	}
	pr.finishBar()

	// 5. Tune.
	show, err := ol.Show(vctx, choice.Ollama)
	if err != nil {
		return fmt.Errorf("read %s: %w", choice.Ollama, err)
	}
	shape, err := ShapeFromInfo(show.ModelInfo)
	if err != nil {
		return fmt.Errorf("%s: %w", choice.Ollama, err)
	}
	size, err := ol.Size(vctx, choice.Ollama)
	if err != nil {
		return err
	}
	server := DetectServer(ctx, env.Runner, env.GOOS, cfg.BackendURL)
	kv := server.EffectiveKVType()
	if server.Known {
		fmt.Fprintf(out, "Ollama server (%s): flash attention %s, KV cache %s\n", server.Where, onOff(server.FlashAttention), kv)
	} else {
		fmt.Fprintf(out, "Ollama server: cannot tell whether flash attention and a quantized KV cache are on (%s); sizing for neither\n", server.Why)
	}
	free := rep.FreeMiB()
	numCtx, err := NumCtx(free, size, shape, kv)
	if err != nil {
		return exitError{ExitNoFit, fmt.Errorf("%s: %w", choice.ID, err)}
	}
	fmt.Fprintf(out, "Context: num_ctx %d of %d trained (free %s, weights %s, KV cache %d bytes a token at %s)\n",
		numCtx, shape.TrainedContext, hardware.GiB(free), mibString(size), shape.KVBytesPerToken(kv), kv)
	name := o.name
	if name == "" {
		name = "c0mpute/" + choice.ID
	}
	fmt.Fprintf(out, "Creating %s from %s\n", name, choice.Ollama)
	if err := ol.Create(ctx, name, choice.Ollama, map[string]any{"num_ctx": numCtx}, func(Progress) {}); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if !server.Known || !server.FlashAttention || kv != "q8_0" {
		fmt.Fprintln(out, "Flash attention and a q8_0 KV cache (half the f16 cache's memory: a longer context) are Ollama server settings. To turn them on:")
		fmt.Fprintln(out, EnableAdvice(server))
		fmt.Fprintln(out, "then run workerd setup again to size the context for them.")
	}

	// 6. Benchmark.
	if !o.noBench {
		fmt.Fprintf(out, "Benchmarking %s (%d tokens)\n", name, o.benchTokens)
		res, err := bench.Run(ctx, ollama.New(cfg.BackendURL, ollama.WithHTTPClient(env.HTTP)), name, bench.Options{MaxTokens: o.benchTokens})
		if err != nil {
			return fmt.Errorf("benchmark %s: %w (skip it with --no-bench)", name, err)
		}
		fmt.Fprintf(out, "  time to first token %s ms, %s tokens/s (%d tokens in %s ms)\n",
			millis(res.TTFT), res.TokPerSec(), res.Tokens, millis(res.Elapsed))
	}

	// 7. Configure.
	cfg.Models = maps.Clone(cfg.Models)
	if cfg.Models == nil {
		cfg.Models = map[string]string{}
	}
	cfg.Models[choice.ID] = name
	cfg.APIURL = apiURL
	unknown, err := config.Save(path, cfg, "relay_url", "token", "backend", "backend_url", "models", "api_url")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Wrote %s\n", path)
	if len(unknown) > 0 {
		fmt.Fprintf(out, "  kept %s, which workerd does not know: remove %s, or workerd run refuses the file\n",
			strings.Join(unknown, ", "), plural(len(unknown), "it", "them"))
	}
	if _, err := config.Load(homeArgs(cfg, path), env.Getenv); err != nil && cfg.Token != "" {
		return fmt.Errorf("the written configuration does not load: %w", err)
	}
	next := "workerd run" + homeFlag(cfg, path)
	if cfg.Token == "" {
		fmt.Fprintf(out, "Next: add your worker token (cwt_…, from POST /v1/worker-tokens with your API key): set %s or run\n  workerd setup --token cwt_…%s\nthen start it: %s\n", config.EnvToken, homeFlag(cfg, path), next)
		return nil
	}
	fmt.Fprintf(out, "Next: %s\n  (or run it as a service: workerd service install%s)\n", next, homeFlag(cfg, path))
	return nil
}

// homeFlag is " --home DIR" unless DIR is the default, and " --config
// FILE" for a file elsewhere than DIR/workerd.json.
func homeFlag(cfg config.Config, path string) string {
	s := ""
	if cfg.Home != config.DefaultHome() {
		s += " --home " + cfg.Home
	}
	if path != filepath.Join(cfg.Home, config.FileName) {
		s += " --config " + path
	}
	return s
}

func homeArgs(cfg config.Config, path string) []string {
	return []string{"--home", cfg.Home, "--config", path}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// choose picks the model: --model, else with --yes the first ranked, else
// the answer on standard input.
func choose(o options, env Env, rec Recommendation, models []CatalogModel, mem int64) (Candidate, error) {
	if o.model != "" {
		for _, c := range rec.Ranked {
			if c.ID == o.model {
				return c, nil
			}
		}
		for _, c := range rec.TooBig {
			if c.ID == o.model {
				return Candidate{}, exitError{ExitNoFit, fmt.Errorf("--model %s needs %s; this machine has %s", c.ID, hardware.GiB(c.MemoryMiB), hardware.GiB(mem))}
			}
		}
		for _, m := range models {
			if m.ID == o.model {
				return Candidate{}, usageError{fmt.Errorf("--model %s: the network names no Ollama model for it, so setup cannot set it up", m.ID)}
			}
		}
		ids := make([]string, len(models))
		for i, m := range models {
			ids[i] = m.ID
		}
		return Candidate{}, usageError{fmt.Errorf("--model %s: the network offers no such model (it offers %s)", o.model, strings.Join(ids, ", "))}
	}
	if len(rec.Ranked) == 0 {
		smallest := "no model has an Ollama model"
		if len(rec.TooBig) > 0 {
			c := rec.TooBig[0]
			smallest = fmt.Sprintf("the smallest, %s, needs %s", c.ID, hardware.GiB(c.MemoryMiB))
		}
		return Candidate{}, exitError{ExitNoFit, fmt.Errorf("no model of the network fits in this machine's %s: %s", hardware.GiB(mem), smallest)}
	}
	if o.yes {
		return rec.Ranked[0], nil
	}
	in := bufio.NewReader(io.LimitReader(env.Stdin, 4096))
	for range 3 {
		fmt.Fprintf(env.Stdout, "Which model? [1-%d, Enter for 1]: ", len(rec.Ranked))
		line, err := in.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" && err != nil {
			fmt.Fprintln(env.Stdout)
			return Candidate{}, usageError{errors.New("no answer on standard input: pass --model ID, or --yes for the most needed model")}
		}
		if line == "" {
			return rec.Ranked[0], nil
		}
		if n, perr := strconv.Atoi(line); perr == nil && n >= 1 && n <= len(rec.Ranked) {
			return rec.Ranked[n-1], nil
		}
		for _, c := range rec.Ranked {
			if c.ID == line {
				return c, nil
			}
		}
		fmt.Fprintf(env.Stdout, "%q is not one of the models listed\n", clip(line))
	}
	return Candidate{}, usageError{errors.New("no valid answer after 3 tries: pass --model ID")}
}

// millis is d in milliseconds with two decimals: a tiny model's first
// token comes in well under one.
func millis(d time.Duration) string {
	return fmt.Sprintf("%d.%02d", d.Milliseconds(), d.Microseconds()%1000/10)
}
