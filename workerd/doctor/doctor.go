// Package doctor is `workerd doctor`: it loads the configuration as
// `workerd run` does and checks, one thing at a time, what a worker needs
// to earn — its settings, its identity, the relay, this machine's clock,
// the worker token, the backend, its models and the network's catalogue —
// and prints one line per check with what it found and, when something is
// wrong, how to fix it.
//
//	workerd doctor [--json] [--skip-bench] [run flags]
//
// A check that needs an earlier one that failed is skipped, with the reason.
// The token check makes a real signed connect to the relay and closes it as
// soon as the relay answers, before registering: the relay stores a worker
// record on connect and deletes it on the close, and a worker that never
// registered serves no model, so dispatch never picks it. What remains
// afterwards is what any connect leaves: the identity's reputation record
// (created, or its last-seen time updated) and the signature's nonce.
package doctor

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/backend/openaicompat"
	"github.com/c0mpute/c0mpute/workerd/bench"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

// Exit codes.
const (
	// ExitOK: no check failed (some may warn).
	ExitOK = 0
	// ExitFail: at least one check failed.
	ExitFail = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 2
)

// Timeouts of the checks. Each bounds one check, so that a host that
// swallows packets costs seconds, not minutes.
const (
	// netTimeout bounds the relay, clock, token and network checks: a
	// working link answers in well under a second.
	netTimeout = 15 * time.Second
	// backendTimeout bounds listing the backend's models; the builtin
	// backend loads its GGUF file first, which takes a while for a large one.
	backendTimeout = 2 * time.Minute
	// benchTimeout bounds measuring one model: a warm-up (which loads the
	// model into memory) and a 64-token reply, on a slow CPU.
	benchTimeout = 3 * time.Minute
	// maxBodyBytes bounds what is read of any peer's answer: a refusal's
	// reason or the catalogue.
	maxBodyBytes = 1 << 20
	// maxBenchModels bounds how many models are measured when the worker
	// serves every backend model (no models setting).
	maxBenchModels = 8
)

// warnSkew is how far this machine's clock may be from the relay's before
// the clock check warns; beyond relaymsg.ConnectSkew the relay refuses the
// connect and the check fails.
const warnSkew = relaymsg.ConnectSkew / 4

const usageText = `usage: workerd doctor [--json] [--skip-bench] [run flags]

Checks, one line each, what this worker needs to earn: config, identity,
relay, clock, token, backend, models and network. The settings come from the
same flags, environment variables and <home>/workerd.json as workerd run.
Exit status 0 when no check failed, 1 when one did, 2 for bad flags.

doctor flags:
  --json        one JSON object per check, one per line
  --skip-bench  do not measure each model's speed

run flags:
`

// Env is what Main reads from outside its arguments.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (os.Getenv outside tests).
	Getenv func(string) string
	// Now is this machine's clock: the clock check compares it with the
	// relay's, and the token check signs the connect with it.
	Now func() time.Time
}

// Status is a check's outcome.
type Status string

// Outcomes of a check.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
	// Skip: the check needs one that failed, or something not configured.
	Skip Status = "skip"
)

// Check is one check's outcome, as --json prints it.
type Check struct {
	Name   string `json:"check"`
	Status Status `json:"status"`
	// Found is what the check found, in one line.
	Found string `json:"found"`
	// Fix is what to do about a warn or FAIL.
	Fix string `json:"fix,omitempty"`
	// Millis is how long the check took.
	Millis int64 `json:"ms"`
}

// Line is the check as the human output prints it.
func (c Check) Line() string {
	s := fmt.Sprintf("%-4s  %-8s  %s", c.Status, c.Name, c.Found)
	if c.Fix != "" {
		s += "; fix: " + c.Fix
	}
	return s
}

// options are doctor's own flags.
type options struct {
	json, skipBench bool
	// rest goes to config.Load.
	rest []string
	help bool
}

// runFlags are the names of config.Load's flags, read from its usage
// text, and whether each takes a value.
func runFlags() map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(config.FlagUsage(), "\n") {
		if !strings.HasPrefix(line, "  -") {
			continue
		}
		f := strings.Fields(line)
		out[strings.TrimPrefix(f[0], "-")] = len(f) > 1
	}
	return out
}

// parseArgs splits doctor's flags from the run flags, which it checks by
// name only: config.Load reads their values.
func parseArgs(args []string) (options, error) {
	var o options
	known := runFlags()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return o, fmt.Errorf("unexpected argument %q: doctor takes only flags", a)
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "h", "help":
			o.help = true
		case "json", "skip-bench":
			b := true
			if hasVal {
				var err error
				if b, err = strconv.ParseBool(val); err != nil {
					return o, fmt.Errorf("--%s=%s: want true or false", name, val)
				}
			}
			if name == "json" {
				o.json = b
			} else {
				o.skipBench = b
			}
		default:
			takesValue, ok := known[name]
			if !ok {
				return o, fmt.Errorf("unknown flag %s", a)
			}
			o.rest = append(o.rest, a)
			if takesValue && !hasVal {
				if i+1 >= len(args) {
					return o, fmt.Errorf("flag %s needs a value", a)
				}
				i++
				o.rest = append(o.rest, args[i])
			}
		}
	}
	return o, nil
}

// Main runs `workerd doctor <args>` and returns the exit code.
func Main(args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(env.Stderr, "workerd doctor:", err)
		fmt.Fprint(env.Stderr, usageText+config.FlagUsage())
		return ExitUsage
	}
	if o.help {
		fmt.Fprint(env.Stdout, usageText+config.FlagUsage())
		return ExitOK
	}
	d := &doctor{env: env, opt: o}
	return d.run(context.Background())
}

// doctor is one run of the checks and what they learned for later ones.
type doctor struct {
	env Env
	opt options

	cfg    config.Config
	cfgOK  bool
	key    ed25519.PrivateKey
	relay  *url.URL
	relayS Status // the relay check's status
	clockS Status
	be     backend.Backend
	models []string // the backend's models, as listed
	failed bool
}

func (d *doctor) emit(c Check) {
	if c.Status == Fail {
		d.failed = true
	}
	c.Found = oneLine(c.Found)
	c.Fix = oneLine(c.Fix)
	if d.opt.json {
		b, _ := json.Marshal(c)
		fmt.Fprintf(d.env.Stdout, "%s\n", b)
		return
	}
	fmt.Fprintln(d.env.Stdout, c.Line())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func (d *doctor) run(ctx context.Context) int {
	steps := []struct {
		name string
		f    func(context.Context) Check
	}{
		{"config", d.checkConfig},
		{"identity", d.checkIdentity},
		{"relay", d.checkRelay},
		{"clock", d.checkClock},
		{"token", d.checkToken},
		{"backend", d.checkBackend},
		{"models", d.checkModels},
		{"network", d.checkNetwork},
	}
	for _, s := range steps {
		start := time.Now()
		c := s.f(ctx)
		c.Name = s.name
		c.Millis = time.Since(start).Milliseconds()
		d.emit(c)
	}
	if c, ok := d.be.(io.Closer); ok {
		c.Close()
	}
	if d.failed {
		return ExitFail
	}
	return ExitOK
}

func skip(why string) Check { return Check{Status: Skip, Found: "skipped: " + why} }

func (d *doctor) checkConfig(context.Context) Check {
	cfg, err := config.Load(d.opt.rest, d.env.Getenv)
	if err != nil {
		// Each line of a validation error names the flag, variable and
		// key, then ": want …".
		var found, fixes []string
		for _, line := range strings.Split(err.Error(), "\n") {
			what, want, ok := strings.Cut(line, ": want ")
			found = append(found, what)
			if ok {
				fixes = append(fixes, "set it to "+want)
			}
		}
		fix := strings.Join(fixes, "; ")
		if fix == "" {
			fix = "correct the setting or file named above (workerd doctor --help lists the flags)"
		}
		return Check{Status: Fail, Found: strings.Join(found, "; "), Fix: fix}
	}
	d.cfg, d.cfgOK = cfg, true
	where := cfg.BackendURL
	if cfg.Backend == builtin.Name {
		where = cfg.GGUF
	}
	return Check{Status: OK, Found: fmt.Sprintf("home %s, relay %s, backend %s %s", cfg.Home, cfg.RelayURL, cfg.Backend, where)}
}

func (d *doctor) checkIdentity(context.Context) Check {
	if !d.cfgOK {
		return skip("needs config")
	}
	path := d.cfg.KeyFile
	fi, err := os.Stat(path)
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("no key file at %s (%v)", path, errors.Unwrap(err)),
			Fix: "run `workerd init` to create one, or point --key (C0MPUTE_WORKER_KEY) at yours"}
	}
	key, err := identity.Load(path)
	if err != nil {
		return Check{Status: Fail, Found: err.Error(),
			Fix: "restore the key file from your backup, or point --key at the right file (a new key with `workerd init` is a new identity: its earnings history starts again)"}
	}
	d.key = key
	found := fmt.Sprintf("%s, wallet %s", path, identity.Address(key))
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return Check{Status: Warn, Found: fmt.Sprintf("%s; the file is readable by group or others (mode %04o)", found, perm),
			Fix: "chmod 600 " + path}
	}
	return Check{Status: OK, Found: found}
}

func (d *doctor) checkRelay(ctx context.Context) Check {
	d.relayS = Fail
	if !d.cfgOK {
		return skip("needs config")
	}
	u, err := url.Parse(d.cfg.RelayURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Hostname() == "" {
		return Check{Status: Fail, Found: fmt.Sprintf("relay URL %q is not a ws:// or wss:// URL", d.cfg.RelayURL),
			Fix: "set --relay (C0MPUTE_RELAY_URL) to the relay URL the network publishes"}
	}
	d.relay = u
	ctx, cancel := context.WithTimeout(ctx, netTimeout)
	defer cancel()
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "wss" {
			port = "443"
		}
	}
	hostport := net.JoinHostPort(host, port)
	start := time.Now()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	dns := time.Since(start)
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("DNS lookup of %s failed: %v", host, err),
			Fix: "check the relay URL (--relay, C0MPUTE_RELAY_URL) for typos and this machine's DNS (try `getent hosts " + host + "`)"}
	}
	start = time.Now()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", hostport)
	tcp := time.Since(start)
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("cannot connect to %s: %v", hostport, unwrapOp(err)),
			Fix: "the relay is down or unreachable from here: check the relay URL and port, and that a firewall or proxy lets outbound connections to " + hostport + " through"}
	}
	defer conn.Close()
	found := fmt.Sprintf("%s (%s): DNS %s, TCP %s", hostport, addrs[0], ms(dns), ms(tcp))
	if u.Scheme == "wss" {
		start = time.Now()
		tc := tls.Client(conn, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return Check{Status: Fail, Found: fmt.Sprintf("TLS with %s failed: %v", hostport, err),
				Fix: "check this machine's clock and CA certificates (a TLS-intercepting proxy needs its CA installed)"}
		}
		found += ", TLS " + ms(time.Since(start))
	}
	d.relayS = OK
	return Check{Status: OK, Found: found}
}

// unwrapOp drops net.OpError's repetition of the address.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

// httpURL is the relay URL with the http(s) scheme, for a plain request.
func httpURL(u *url.URL) string {
	v := *u
	v.Scheme = strings.Replace(u.Scheme, "ws", "http", 1)
	return v.String()
}

func (d *doctor) checkClock(ctx context.Context) Check {
	d.clockS = Fail
	if d.relayS != OK {
		return skip("needs the relay")
	}
	ctx, cancel := context.WithTimeout(ctx, netTimeout)
	defer cancel()
	// A plain GET: the relay answers it (refusing the missing upgrade)
	// without a connect, and every HTTP server dates its answers.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL(d.relay), nil)
	if err != nil {
		return Check{Status: Fail, Found: err.Error(), Fix: "set --relay to a valid URL"}
	}
	before := d.env.Now()
	resp, err := http.DefaultClient.Do(req)
	after := d.env.Now()
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("no answer from %s: %v", req.URL.Redacted(), err),
			Fix: "check the relay URL and this machine's network"}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		d.clockS = Warn
		return Check{Status: Warn, Found: "the relay's answer has no valid Date header, so the clock cannot be compared",
			Fix: "make sure NTP keeps this machine's clock right (`timedatectl set-ntp true`)"}
	}
	// Date is truncated to the second: its middle is the best guess.
	local := before.Add(after.Sub(before) / 2)
	skew := local.Sub(date.Add(500 * time.Millisecond)).Round(time.Second)
	found := fmt.Sprintf("local clock %s the relay's by %s", aheadBehind(skew), abs(skew))
	if abs(skew) <= time.Second {
		// Within what a Date header (whole seconds) can tell.
		found = "local clock within 1s of the relay's"
	}
	const fix = "enable NTP (`timedatectl set-ntp true`, or your OS's automatic time setting) and check the time zone is set, not the clock shifted"
	switch {
	case abs(skew) > relaymsg.ConnectSkew:
		return Check{Status: Fail, Found: fmt.Sprintf("%s: beyond the %s the relay accepts in a signed connect", found, relaymsg.ConnectSkew), Fix: fix}
	case abs(skew) > warnSkew:
		d.clockS = Warn
		return Check{Status: Warn, Found: fmt.Sprintf("%s: near the %s limit of a signed connect", found, relaymsg.ConnectSkew), Fix: fix}
	}
	d.clockS = OK
	return Check{Status: OK, Found: found}
}

func aheadBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// tokenFix is how to get a working worker token.
const tokenFix = "create a worker token in the dashboard or with POST /v1/worker-tokens (your API key), and run with it: --token or C0MPUTE_WORKER_TOKEN"

func (d *doctor) checkToken(ctx context.Context) Check {
	switch {
	case !d.cfgOK:
		return skip("needs config")
	case d.key == nil:
		return skip("needs the identity")
	case d.relayS != OK:
		return skip("needs the relay")
	case d.clockS == Fail:
		return skip("needs a right clock (the connect is signed with the time)")
	}
	ctx, cancel := context.WithTimeout(ctx, netTimeout)
	defer cancel()
	h := http.Header{}
	relaymsg.SignConnect(h, d.cfg.Token, d.key, d.env.Now())
	h.Set("User-Agent", "workerd-doctor")
	ws, resp, err := websocket.Dial(ctx, d.cfg.RelayURL, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		// Accepted: close at once, before registering, so the relay
		// deletes the worker record it made on connect.
		ws.Close(websocket.StatusNormalClosure, "workerd doctor")
		return Check{Status: OK, Found: "the relay accepted the worker token and the signed connect (closed before registering)"}
	}
	if resp == nil {
		return Check{Status: Fail, Found: fmt.Sprintf("connect to %s failed: %v", d.cfg.RelayURL, err),
			Fix: "check the relay URL; a proxy that does not pass WebSockets breaks the connection"}
	}
	why := ""
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		why = strings.TrimSpace(string(b))
	}
	if why == "" {
		why = http.StatusText(resp.StatusCode)
	}
	refused := fmt.Sprintf("the relay refused the worker (HTTP %d): %s", resp.StatusCode, why)
	switch {
	case strings.Contains(why, "banned"):
		return Check{Status: Fail, Found: refused,
			Fix: "this identity or token failed the network's checks; GET /v1/workers shows each identity's standing and last reason"}
	case strings.Contains(why, "timestamp"):
		return Check{Status: Fail, Found: refused, Fix: "set this machine's clock right: enable NTP (`timedatectl set-ntp true`)"}
	case resp.StatusCode == http.StatusTooManyRequests:
		return Check{Status: Warn, Found: "the token is valid, but " + why,
			Fix: "a token takes a few connections: stop the other workerd processes on it, or give each machine its own token"}
	case resp.StatusCode == http.StatusForbidden:
		return Check{Status: Fail, Found: refused, Fix: "the token was revoked: " + tokenFix}
	case resp.StatusCode == http.StatusUnauthorized:
		return Check{Status: Fail, Found: refused, Fix: "the token is not one the network knows (a typo, or another network's): " + tokenFix}
	}
	return Check{Status: Fail, Found: refused, Fix: "the relay is not answering connects right; try again later, or check the relay URL"}
}

// newBackend is the backend of the configuration, as `workerd run` makes it.
func newBackend(cfg config.Config, log *slog.Logger) (backend.Backend, error) {
	switch cfg.Backend {
	case "ollama":
		return ollama.New(cfg.BackendURL), nil
	case builtin.Name:
		return builtin.New(cfg.GGUF, builtin.WithLogger(log))
	}
	opts := []openaicompat.Option{openaicompat.WithAPIKey(cfg.BackendKey)}
	if cfg.DeveloperRole {
		opts = append(opts, openaicompat.WithDeveloperRole())
	}
	return openaicompat.New(cfg.BackendURL, opts...), nil
}

func (d *doctor) checkBackend(ctx context.Context) Check {
	if !d.cfgOK {
		return skip("needs config")
	}
	ctx, cancel := context.WithTimeout(ctx, backendTimeout)
	defer cancel()
	where := d.cfg.BackendURL
	if d.cfg.Backend == builtin.Name {
		where = d.cfg.GGUF
	}
	be, err := newBackend(d.cfg, slog.New(slog.NewTextHandler(d.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("builtin cannot load %s: %v", where, err),
			Fix: "point --gguf (C0MPUTE_GGUF) at a GGUF model file the built-in engine supports"}
	}
	models, err := be.Models(ctx)
	if err != nil {
		fix := "start the inference server, or set --backend-url (C0MPUTE_BACKEND_URL) to where it listens"
		if d.cfg.Backend == "ollama" {
			fix = "start Ollama (`ollama serve`, or `systemctl start ollama`), or set --backend-url / OLLAMA_HOST to where it listens"
		}
		if c, ok := be.(io.Closer); ok {
			c.Close()
		}
		return Check{Status: Fail, Found: fmt.Sprintf("%s at %s: %s", d.cfg.Backend, where, backend.SafeText(err)), Fix: fix}
	}
	d.be, d.models = be, models
	if len(models) == 0 {
		return Check{Status: Fail, Found: fmt.Sprintf("%s at %s serves no model", d.cfg.Backend, where), Fix: pullFix(d.cfg.Backend, "a model", models)}
	}
	return Check{Status: OK, Found: fmt.Sprintf("%s at %s: %d model(s): %s", d.cfg.Backend, where, len(models), list(models, 10))}
}

// pullFix is how to get model onto the backend; have is what it lists.
func pullFix(kind, model string, have []string) string {
	switch kind {
	case "ollama":
		return "`ollama pull " + model + "`, or correct --models (C0MPUTE_MODELS)"
	case builtin.Name:
		return "the built-in backend serves only its --gguf file, as " + list(have, 1) + ": set --models NETWORK-ID=" + list(have, 1) + ", or --gguf to the model's file"
	}
	return "load " + model + " on the inference server, or correct --models (C0MPUTE_MODELS)"
}

// list is up to n names, then how many more.
func list(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// offered maps the network ids the worker would offer to backend model
// names, as the agent does: the models setting, or every backend model
// under its short name. missing lists configured ids whose model is absent.
func (d *doctor) offered() (out map[string]string, missing []string) {
	out = map[string]string{}
	if len(d.cfg.Models) == 0 {
		for _, m := range d.models {
			out[agent.ShortName(m)] = m
		}
		return out, nil
	}
	for id, name := range d.cfg.Models {
		if i := slices.IndexFunc(d.models, func(h string) bool { return h == name || agent.ShortName(h) == name }); i >= 0 {
			out[id] = d.models[i]
		} else {
			missing = append(missing, id+"="+name)
		}
	}
	slices.Sort(missing)
	return out, missing
}

func (d *doctor) checkModels(ctx context.Context) Check {
	if d.be == nil {
		return skip("needs the backend")
	}
	offered, missing := d.offered()
	ids := slices.Sorted(maps.Keys(offered))
	var parts []string
	status, fix := OK, ""
	for _, m := range missing {
		parts = append(parts, m+": not on the backend")
		_, name, _ := strings.Cut(m, "=")
		status, fix = Fail, pullFix(d.cfg.Backend, name, d.models)
	}
	for i, id := range ids {
		name := offered[id]
		label := id
		if name != id {
			label = id + "=" + name
		}
		if d.opt.skipBench || i >= maxBenchModels {
			parts = append(parts, label+": present")
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, benchTimeout)
		r, err := bench.Run(bctx, d.be, name, bench.Options{})
		cancel()
		if err != nil {
			parts = append(parts, label+": "+err.Error())
			status, fix = Fail, "check the backend's log: the model is listed but does not generate"
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: TTFT %s, %s tok/s", label, ms(r.TTFT), r.TokPerSec()))
		if r.MilliTokPerSec < dispatch.MinMilliTokPerSec && status == OK {
			status = Warn
			fix = fmt.Sprintf("below %d tok/s the network gives a worker its fewest jobs: serve a smaller or more quantised model, or run it on a GPU",
				dispatch.MinMilliTokPerSec/1000)
		}
	}
	if len(ids) > maxBenchModels && !d.opt.skipBench {
		parts = append(parts, fmt.Sprintf("(measured the first %d)", maxBenchModels))
	}
	if len(parts) == 0 {
		return Check{Status: Fail, Found: "no model to offer", Fix: pullFix(d.cfg.Backend, "a model", d.models)}
	}
	return Check{Status: status, Found: strings.Join(parts, "; "), Fix: fix}
}

// catalogue is what is read of GET /v1/models.
type catalogue struct {
	Data []struct {
		ID      string   `json:"id"`
		Aliases []string `json:"aliases"`
	} `json:"data"`
}

func (d *doctor) checkNetwork(ctx context.Context) Check {
	if !d.cfgOK {
		return skip("needs config")
	}
	if d.cfg.APIURL == "" {
		return skip("no API URL: the relay URL does not say where the network's API is; set --api-url (" + config.EnvAPIURL + ") to check the catalogue")
	}
	var ids []string
	switch {
	case len(d.cfg.Models) > 0:
		ids = slices.Sorted(maps.Keys(d.cfg.Models))
	case d.be != nil:
		off, _ := d.offered()
		ids = slices.Sorted(maps.Keys(off))
	default:
		return skip("needs the backend (no models setting: the worker offers the backend's models)")
	}
	u := strings.TrimRight(d.cfg.APIURL, "/")
	if strings.HasSuffix(u, "/v1") {
		u += "/models"
	} else {
		u += "/v1/models"
	}
	ctx, cancel := context.WithTimeout(ctx, netTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("API URL %q: %v", d.cfg.APIURL, err), Fix: "set --api-url to the network's API URL, e.g. https://api.example/v1"}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("GET %s: %v", u, unwrapOp(err)), Fix: "check --api-url (" + config.EnvAPIURL + ") and this machine's network"}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	var cat catalogue
	switch {
	case err != nil:
		return Check{Status: Fail, Found: fmt.Sprintf("GET %s: %v", u, err), Fix: "try again; check this machine's network"}
	case resp.StatusCode != http.StatusOK:
		return Check{Status: Fail, Found: fmt.Sprintf("GET %s: HTTP %d", u, resp.StatusCode), Fix: "check --api-url: it is the OpenAI base URL of the network, ending in /v1"}
	case len(b) > maxBodyBytes:
		return Check{Status: Fail, Found: fmt.Sprintf("GET %s: answer larger than %d bytes", u, maxBodyBytes), Fix: "check --api-url points at the network's API"}
	}
	if err := json.Unmarshal(b, &cat); err != nil {
		return Check{Status: Fail, Found: fmt.Sprintf("GET %s: not a model list: %v", u, err), Fix: "check --api-url points at the network's API"}
	}
	known := map[string]bool{}
	var all []string
	for _, m := range cat.Data {
		known[m.ID] = true
		all = append(all, m.ID)
		for _, a := range m.Aliases {
			known[a] = true
		}
	}
	var in, out []string
	for _, id := range ids {
		if known[id] {
			in = append(in, id)
		} else {
			out = append(out, id)
		}
	}
	fix := fmt.Sprintf("serve the network's models under their ids: --models NETWORK-ID=BACKEND-MODEL (C0MPUTE_MODELS); the network's models are %s", list(all, 10))
	switch {
	case len(in) == 0:
		return Check{Status: Fail, Found: fmt.Sprintf("none of the offered models (%s) is in the network's catalogue, so the relay would refuse the registration", list(ids, 10)), Fix: fix}
	case len(out) > 0:
		return Check{Status: Warn, Found: fmt.Sprintf("%s in the catalogue; %s not (the network ignores them)", list(in, 10), list(out, 10)), Fix: fix}
	}
	return Check{Status: OK, Found: fmt.Sprintf("all %d offered model(s) in the network's catalogue: %s", len(in), list(in, 10))}
}
