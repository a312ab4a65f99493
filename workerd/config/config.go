// Package config is workerd's configuration: defaults, then a JSON config
// file, then environment variables, then flags — each later source wins.
// It is validated once at start-up and fails with a message that says which
// setting is wrong.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/workerd/backend/comfyui"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// Config is workerd's settings.
type Config struct {
	// Home is the state folder: the key file and the config file live
	// there.
	Home string `json:"-" validate:"required"`
	// RelayURL is the relay's WebSocket URL.
	RelayURL string `json:"relay_url" validate:"required,url,startswith=ws"`
	// Token is the worker token (cwt_…) from the network's dashboard/API.
	Token string `json:"token" validate:"required,startswith=cwt_"`
	// KeyFile is the identity keypair; default <Home>/worker-key.json.
	KeyFile string `json:"key_file" validate:"required"`
	// Backend is "ollama", "openai" (any OpenAI-compatible server),
	// "comfyui" (images) or "builtin" (workerd's own engine on a GGUF
	// file).
	Backend string `json:"backend" validate:"required,oneof=ollama openai comfyui builtin"`
	// BackendURL is the inference server's base URL (not used by builtin).
	BackendURL string `json:"backend_url" validate:"required_unless=Backend builtin,omitempty,url"`
	// GGUF is the model file the builtin backend serves, under its file
	// name without ".gguf".
	GGUF string `json:"gguf,omitempty"`
	// BackendKey is an optional API key for an OpenAI-compatible server.
	BackendKey string `json:"backend_key,omitempty"`
	// DeveloperRole passes developer messages to an OpenAI-compatible
	// server as they are (its template knows the role, as gpt-oss on vLLM
	// does) instead of as system messages.
	DeveloperRole bool `json:"developer_role,omitempty"`
	// Models maps network model ids to backend model names; empty serves
	// every backend model under its own name.
	Models map[string]string `json:"models,omitempty" validate:"dive,keys,required,max=128,endkeys,required"`
	// Workflow is a ComfyUI workflow file (API format, with
	// placeholders) that --backend comfyui renders jobs with instead of
	// its built-in text-to-image graph. It is checked at start.
	Workflow string `json:"workflow,omitempty"`
	// ImageModels are the backend model names of an OpenAI-compatible
	// server that render images (POST /v1/images/generations): the server
	// does not say which they are.
	ImageModels []string `json:"image_models,omitempty" validate:"max=64,dive,required,max=128"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level" validate:"oneof=debug info warn error"`
	// MetricsAddr, when set, is the host:port workerd serves Prometheus
	// metrics on (/metrics); empty serves none.
	MetricsAddr string `json:"metrics_addr,omitempty" validate:"omitempty,hostname_port|tcp_addr"`
	// APIURL is the gateway's OpenAI base URL (https://…/v1), which
	// commands that read the account (workerd earnings) call.
	APIURL string `json:"api_url,omitempty" validate:"omitempty,url,startswith=http"`
	// Shard makes the worker a ring member (--backend builtin only): it
	// offers to hold a layer range of the network's ring models, besides
	// or instead of serving the GGUF file whole.
	Shard bool `json:"shard,omitempty"`
	// ShardMemory is the memory in bytes given to a ring's layers (the
	// VRAM figure of the capability record).
	ShardMemory int64 `json:"shard_memory,omitempty" validate:"min=0"`
	// ShardListen is the host:port the stage listener accepts other
	// stages on.
	ShardListen string `json:"shard_listen,omitempty" validate:"omitempty,hostname_port|tcp_addr"`
	// ShardAdvertise is the host:port other stages dial (behind NAT or a
	// proxy it differs from ShardListen); default ShardListen.
	ShardAdvertise string `json:"shard_advertise,omitempty" validate:"omitempty,hostname_port|tcp_addr"`
	// ShardUplink is the upload bandwidth in bits per second the
	// capability record declares (a hint: the gateway places by measured
	// round trips).
	ShardUplink int64 `json:"shard_uplink,omitempty" validate:"min=0"`
	// DraftSpec is --draft as written (the file keeps it so, as "draft"):
	// the drafter of the ring models this member drives, for speculative
	// decoding; empty is lookup for every model. Load parses it into
	// Draft.
	DraftSpec string `json:"draft,omitempty"`
	// Draft is DraftSpec parsed (speculate.ParseChoice), every draft
	// model file in it checked to open as a GGUF file. The zero value
	// drafts by lookup.
	Draft speculate.Choice `json:"-"`
}

// DefaultShardUplink is the declared uplink when none is set: 100 Mbit/s,
// a common home connection.
const DefaultShardUplink = 100_000_000

// Environment variables.
const (
	EnvHome           = "C0MPUTE_HOME"
	EnvRelayURL       = "C0MPUTE_RELAY_URL"
	EnvToken          = "C0MPUTE_WORKER_TOKEN"
	EnvKeyFile        = "C0MPUTE_WORKER_KEY"
	EnvBackend        = "C0MPUTE_BACKEND"
	EnvBackendURL     = "C0MPUTE_BACKEND_URL"
	EnvBackendKey     = "C0MPUTE_BACKEND_KEY"
	EnvGGUF           = "C0MPUTE_GGUF"
	EnvModels         = "C0MPUTE_MODELS"
	EnvDeveloperRole  = "C0MPUTE_DEVELOPER_ROLE"
	EnvLogLevel       = "C0MPUTE_LOG_LEVEL"
	EnvWorkflow       = "C0MPUTE_COMFYUI_WORKFLOW"
	EnvImageModels    = "C0MPUTE_IMAGE_MODELS"
	EnvMetricsAddr    = "C0MPUTE_METRICS_ADDR"
	EnvAPIURL         = "C0MPUTE_API_URL"
	EnvShard          = "C0MPUTE_SHARD"
	EnvShardMemory    = "C0MPUTE_SHARD_MEMORY"
	EnvShardListen    = "C0MPUTE_SHARD_LISTEN"
	EnvShardAdvertise = "C0MPUTE_SHARD_ADVERTISE"
	EnvShardUplink    = "C0MPUTE_SHARD_UPLINK"
	EnvDraft          = "C0MPUTE_DRAFT"
	EnvOllamaHost     = "OLLAMA_HOST"
)

// DefaultHome is ~/.c0mpute.
func DefaultHome() string {
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".c0mpute")
	}
	return ".c0mpute"
}

// OllamaURL turns OLLAMA_HOST (host, host:port, :port or a URL) into a base
// URL. As in Ollama, a missing port is 11434, and a listen-on-all address
// (0.0.0.0, ::, empty) is reached on loopback.
func OllamaURL(host string) string {
	host = strings.TrimSpace(host)
	switch {
	case host == "":
		return "http://127.0.0.1:11434"
	case strings.HasPrefix(host, "http://"), strings.HasPrefix(host, "https://"):
		return strings.TrimRight(host, "/")
	}
	h, port, err := net.SplitHostPort(host)
	if err != nil { // no port
		h, port = strings.Trim(host, "[]"), "11434"
	}
	switch h {
	case "", "0.0.0.0", "::":
		h = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(h, port)
}

// ParseModels reads "id=backend,id2=backend2" (or bare names served under
// their own name).
func ParseModels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, name, ok := strings.Cut(part, "=")
		if !ok {
			name = id
		}
		id, name = strings.TrimSpace(id), strings.TrimSpace(name)
		if id == "" || name == "" {
			return nil, fmt.Errorf("%q is not id=backend-model", part)
		}
		out[id] = name
	}
	return out, nil
}

// flags are the run command's flags.
type flags struct {
	set                                                  *flag.FlagSet
	home, file, relay, token, keyFile, backend, ggufPath *string
	backendURL, backendKey, models, logLevel, workflow   *string
	imageModels                                          *string
	metrics, apiURL                                      *string
	shardMemory, shardListen, shardAdvertise, shardUp    *string
	draft                                                *string
	developer, shard                                     *bool
}

func newFlags() flags {
	fs := flag.NewFlagSet("workerd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return flags{set: fs,
		home:           fs.String("home", "", "state folder (env "+EnvHome+", default ~/.c0mpute)"),
		file:           fs.String("config", "", "JSON config file (default <home>/workerd.json if present)"),
		relay:          fs.String("relay", "", "relay WebSocket URL, ws:// or wss:// (env "+EnvRelayURL+")"),
		token:          fs.String("token", "", "worker token cwt_… (env "+EnvToken+")"),
		keyFile:        fs.String("key", "", "identity keypair file (env "+EnvKeyFile+", default <home>/worker-key.json)"),
		backend:        fs.String("backend", "", "ollama, openai, comfyui or builtin (env "+EnvBackend+", default ollama)"),
		ggufPath:       fs.String("gguf", "", "GGUF model file for the builtin backend (env "+EnvGGUF+")"),
		backendURL:     fs.String("backend-url", "", "inference server URL (env "+EnvBackendURL+"; ollama default from "+EnvOllamaHost+")"),
		backendKey:     fs.String("backend-key", "", "API key for an OpenAI-compatible server (env "+EnvBackendKey+")"),
		developer:      fs.Bool("developer-role", false, "send developer messages as they are to an OpenAI-compatible server (env "+EnvDeveloperRole+"=1)"),
		models:         fs.String("models", "", "id=backend-model,… to serve (env "+EnvModels+"; default: every backend model)"),
		logLevel:       fs.String("log-level", "", "debug, info, warn or error (env "+EnvLogLevel+")"),
		imageModels:    fs.String("image-models", "", "backend models of an OpenAI-compatible server that render images, name,… (env "+EnvImageModels+")"),
		workflow:       fs.String("workflow", "", "ComfyUI workflow file, API format with {{prompt}} {{width}} {{height}} {{checkpoint}} placeholders (env "+EnvWorkflow+"; default: built-in text-to-image)"),
		metrics:        fs.String("metrics", "", "serve Prometheus metrics on host:port, at /metrics (env "+EnvMetricsAddr+"; default off)"),
		apiURL:         fs.String("api-url", "", "the gateway's API base URL, https://…/v1 (env "+EnvAPIURL+")"),
		shard:          fs.Bool("shard", false, "be a ring member: hold a layer range of the network's ring models (--backend builtin; env "+EnvShard+"=1)"),
		shardMemory:    fs.String("shard-memory", "", "memory for ring layers, bytes or with a K/M/G/Ki/Mi/Gi suffix (env "+EnvShardMemory+")"),
		shardListen:    fs.String("shard-listen", "", "host:port the stage listener accepts other stages on (env "+EnvShardListen+")"),
		shardAdvertise: fs.String("shard-advertise", "", "host:port other stages dial, if not --shard-listen (env "+EnvShardAdvertise+")"),
		shardUp:        fs.String("shard-uplink", "", "upload bandwidth declared to the network, bits/s or with a K/M/G suffix (env "+EnvShardUplink+", default 100M)"),
		draft:          fs.String("draft", "", "drafter for ring models this member drives: lookup (default), none, a draft GGUF file sharing the model's vocabulary, or MODEL=... per model, comma-separated (env "+EnvDraft+")"),
	}
}

// FlagUsage is the run command's flags, one per line, as --help shows
// them.
func FlagUsage() string {
	var b strings.Builder
	f := newFlags()
	f.set.SetOutput(&b)
	f.set.PrintDefaults()
	return b.String()
}

// ErrHelp is returned by Load for -h or --help: the caller prints the
// usage and exits 0.
var ErrHelp = flag.ErrHelp

// Load builds the configuration from the file, env and the flags in args.
// getenv is os.Getenv outside tests.
func Load(args []string, getenv func(string) string) (Config, error) {
	f := newFlags()
	if err := f.set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, ErrHelp
		}
		return Config{}, fmt.Errorf("%v (workerd --help lists the flags)", err)
	}
	if f.set.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q: run takes only flags (workerd --help lists them)", f.set.Arg(0))
	}
	c := Config{Backend: "ollama", LogLevel: "info"}
	c.Home = first(*f.home, getenv(EnvHome), DefaultHome())
	path := first(*f.file, filepath.Join(c.Home, "workerd.json"))
	fromFile := false
	switch b, err := os.ReadFile(path); {
	case err == nil:
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("config file %s: %s", path, describeJSON(b, err))
		}
		fromFile = true
	case *f.file != "" || !errors.Is(err, fs.ErrNotExist):
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	c.RelayURL = first(*f.relay, getenv(EnvRelayURL), c.RelayURL)
	c.Token = first(*f.token, getenv(EnvToken), c.Token)
	c.KeyFile = first(*f.keyFile, getenv(EnvKeyFile), c.KeyFile, filepath.Join(c.Home, "worker-key.json"))
	c.Backend = first(*f.backend, getenv(EnvBackend), c.Backend)
	c.BackendKey = first(*f.backendKey, getenv(EnvBackendKey), c.BackendKey)
	c.GGUF = first(*f.ggufPath, getenv(EnvGGUF), c.GGUF)
	c.LogLevel = first(*f.logLevel, getenv(EnvLogLevel), c.LogLevel)
	c.Workflow = first(*f.workflow, getenv(EnvWorkflow), c.Workflow)
	if m := first(*f.imageModels, getenv(EnvImageModels)); m != "" {
		c.ImageModels = nil
		for _, name := range strings.Split(m, ",") {
			if name = strings.TrimSpace(name); name != "" {
				c.ImageModels = append(c.ImageModels, name)
			}
		}
	}
	c.MetricsAddr = first(*f.metrics, getenv(EnvMetricsAddr), c.MetricsAddr)
	c.APIURL = first(*f.apiURL, getenv(EnvAPIURL), c.APIURL)
	defaultURL := ""
	if c.Backend == "ollama" {
		defaultURL = OllamaURL(getenv(EnvOllamaHost))
	}
	c.BackendURL = first(*f.backendURL, getenv(EnvBackendURL), c.BackendURL, defaultURL)
	c.DeveloperRole = *f.developer || getenv(EnvDeveloperRole) == "1" || c.DeveloperRole
	c.Shard = *f.shard || getenv(EnvShard) == "1" || c.Shard
	for _, q := range []struct {
		flag, env string
		val       *string
		dst       *int64
	}{{"--shard-memory", EnvShardMemory, f.shardMemory, &c.ShardMemory}, {"--shard-uplink", EnvShardUplink, f.shardUp, &c.ShardUplink}} {
		if v := first(*q.val, getenv(q.env)); v != "" {
			n, err := ParseBytes(v)
			if err != nil {
				return Config{}, fmt.Errorf("%s (or %s): %w", q.flag, q.env, err)
			}
			*q.dst = n
		}
	}
	c.ShardListen = first(*f.shardListen, getenv(EnvShardListen), c.ShardListen)
	c.ShardAdvertise = first(*f.shardAdvertise, getenv(EnvShardAdvertise), c.ShardAdvertise, c.ShardListen)
	c.DraftSpec = first(*f.draft, getenv(EnvDraft), c.DraftSpec)
	if c.Shard && c.ShardUplink == 0 {
		c.ShardUplink = DefaultShardUplink
	}
	if m := first(*f.models, getenv(EnvModels)); m != "" {
		parsed, err := ParseModels(m)
		if err != nil {
			return Config{}, fmt.Errorf("--models (or %s): %w", EnvModels, err)
		}
		c.Models = parsed
	}
	file := ""
	if fromFile {
		file = path
	}
	if err := validate.Struct(c); err != nil {
		return Config{}, describe(err, c, file)
	}
	if err := c.checkShard(); err != nil {
		return Config{}, err
	}
	if err := c.checkDraft(file); err != nil {
		return Config{}, err
	}
	if len(c.ImageModels) > 0 && c.Backend != "openai" {
		return Config{}, fmt.Errorf("--image-models (or %s) is for --backend openai, not %s (comfyui serves only images already)", EnvImageModels, c.Backend)
	}
	if c.Workflow != "" {
		if c.Backend != "comfyui" {
			return Config{}, fmt.Errorf("--workflow (or %s) is for --backend comfyui, not %s", EnvWorkflow, c.Backend)
		}
		if _, err := comfyui.LoadWorkflow(c.Workflow); err != nil {
			return Config{}, fmt.Errorf("--workflow (or %s): %w", EnvWorkflow, err)
		}
	}
	return c, nil
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// checkShard checks the settings of the builtin backend and of a ring
// member together: builtin serves a GGUF file, a ring, or both.
func (c *Config) checkShard() error {
	switch {
	case c.Backend == "builtin" && c.GGUF == "" && !c.Shard:
		return fmt.Errorf("--gguf (or %s) is not set, and --backend builtin needs it (or --shard, to be a ring member): want a GGUF model file", EnvGGUF)
	case !c.Shard:
		return nil
	case c.Backend != "builtin":
		return fmt.Errorf("--shard (or %s) is for --backend builtin, not %s: ring stages run on the built-in engine", EnvShard, c.Backend)
	case c.ShardMemory <= 0:
		return fmt.Errorf("--shard-memory (or %s) is not set, and --shard needs it: want the memory for ring layers, e.g. 8Gi", EnvShardMemory)
	case c.ShardListen == "":
		return fmt.Errorf("--shard-listen (or %s) is not set, and --shard needs it: want the host:port other stages connect to, e.g. 0.0.0.0:7420", EnvShardListen)
	}
	host, _, _ := net.SplitHostPort(c.ShardAdvertise)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("--shard-advertise (or %s) is %q: want the host:port other stages dial (--shard-listen %s listens on every interface, which no peer can dial)", EnvShardAdvertise, c.ShardAdvertise, c.ShardListen)
	}
	return nil
}

// checkDraft parses DraftSpec into Draft and opens every draft model file
// it names as a GGUF file, so that a typo fails at start rather than at
// the first ring this member drives. A drafter is for ring members only.
// file is the config file the settings came from, or "".
func (c *Config) checkDraft(file string) error {
	if c.DraftSpec == "" {
		return nil
	}
	where := settings["DraftSpec"].where(file)
	if !c.Shard {
		return fmt.Errorf("%s is set, but --shard (or %s) is not: a drafter serves only the ring models a ring member drives (add --shard, or unset the drafter)", where, EnvShard)
	}
	choice, err := speculate.ParseChoice(c.DraftSpec)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := checkDraftFile(choice.Default, ""); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	for _, model := range slices.Sorted(maps.Keys(choice.PerModel)) {
		if err := checkDraftFile(choice.PerModel[model], model); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	c.Draft = choice
	return nil
}

// checkDraftFile opens the GGUF file of a draft model spec (and closes
// it): its header and tensor directory must parse. Specs that name no
// file pass. model is the ring model the spec is for, "" for the default.
func checkDraftFile(s speculate.Spec, model string) error {
	if s.Mode != speculate.ModeModel {
		return nil
	}
	what := "the draft model"
	if model != "" {
		what = "the draft model for " + model
	}
	const want = "want a GGUF model file sharing the ring model's vocabulary, or lookup, or none"
	st, err := os.Stat(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s, %s, does not exist: %s", what, s.Path, want)
	case err != nil:
		return fmt.Errorf("%s, %s: %w", what, s.Path, err)
	case st.IsDir():
		return fmt.Errorf("%s, %s, is a folder: %s", what, s.Path, want)
	}
	f, err := gguf.Open(s.Path)
	if err != nil {
		// gguf.Open names the path first; say it once.
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), s.Path+": "), "gguf: ")
		return fmt.Errorf("%s, %s, does not open as a GGUF file (%s): %s", what, s.Path, msg, want)
	}
	return f.Close()
}

// ParseBytes reads a byte or bit count: digits with an optional K, M, G
// or T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024) suffix.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a positive count: want digits with an optional K, M, G, T, Ki, Mi, Gi or Ti suffix, e.g. 8Gi", s)
	}
	return n * mult, nil
}

// setting is where a field comes from and what it takes, for messages.
type setting struct{ flag, env, key, want string }

var settings = map[string]setting{
	"RelayURL": {"--relay", EnvRelayURL, "relay_url", "the relay's WebSocket URL, ws:// or wss:// (the network publishes it; scripts/dev prints the local one)"},
	"Token":    {"--token", EnvToken, "token", "a worker token, cwt_… (create one with POST /v1/worker-tokens and your API key)"},
	"KeyFile":  {"--key", EnvKeyFile, "key_file", "the identity keypair file workerd init writes"},
	"Backend":  {"--backend", EnvBackend, "backend", "ollama, openai (any OpenAI-compatible server), comfyui (images) or builtin (a GGUF file)"},
	"BackendURL": {"--backend-url", EnvBackendURL, "backend_url",
		"the inference server's base URL, http(s)://host:port (Ollama: http://127.0.0.1:11434, vLLM: http://127.0.0.1:8000/v1, ComfyUI: http://127.0.0.1:8188)"},
	"GGUF": {"--gguf", EnvGGUF, "gguf", "a GGUF model file, which --backend builtin serves"},
	"Models": {"--models", EnvModels, "models",
		`network-id=backend-model pairs (in workerd.json an object: {"network-id": "backend-model"})`},
	"LogLevel": {"--log-level", EnvLogLevel, "log_level", "debug, info, warn or error"},
	"MetricsAddr": {"--metrics", EnvMetricsAddr, "metrics_addr",
		"host:port to serve Prometheus metrics on, e.g. 127.0.0.1:9464 (:9464 listens on every interface)"},
	"APIURL":         {"--api-url", EnvAPIURL, "api_url", "the gateway's API base URL, http(s)://host/v1"},
	"ShardListen":    {"--shard-listen", EnvShardListen, "shard_listen", "host:port, e.g. 0.0.0.0:7420"},
	"ShardAdvertise": {"--shard-advertise", EnvShardAdvertise, "shard_advertise", "host:port other stages dial, e.g. 203.0.113.7:7420"},
	"DraftSpec": {"--draft", EnvDraft, "draft",
		"lookup, none, a draft GGUF file sharing the model's vocabulary, or MODEL=… per model, comma-separated, e.g. lookup,qwen3-32b=/models/qwen3-0.6b.gguf"},
}

// where names a setting's sources for a message: its flag, its variable
// and, when the settings came from one, its key in the config file.
func (st setting) where(file string) string {
	w := fmt.Sprintf("%s (or %s", st.flag, st.env)
	if file != "" {
		w += fmt.Sprintf(`, or %q in %s`, st.key, file)
	}
	return w + ")"
}

// describe turns validation errors into one line each, naming the flag,
// the variable and the file key a setting comes from and what it takes.
func describe(err error, c Config, file string) error {
	var ve validator.ValidationErrors
	if !errors.As(err, &ve) {
		return fmt.Errorf("workerd configuration: %w", err)
	}
	var lines []string
	for _, fe := range ve {
		st, ok := settings[fe.StructField()]
		if !ok {
			lines = append(lines, fmt.Sprintf("%s fails %q", fe.StructField(), fe.Tag()))
			continue
		}
		where := st.where(file)
		var what string
		switch v := fmt.Sprint(fe.Value()); {
		case fe.Tag() == "required" || fe.Tag() == "required_unless" || fe.Tag() == "required_if":
			what = "is not set"
			if fe.Tag() == "required_if" {
				what = "is not set, and --backend " + c.Backend + " needs it"
			}
		case v == "" || fe.Kind() == reflect.Map:
			what = "is not valid"
		default:
			what = fmt.Sprintf("is %q", v)
		}
		lines = append(lines, fmt.Sprintf("%s %s: want %s", where, what, st.want))
	}
	return errors.New(strings.Join(lines, "\n"))
}

// describeJSON is a config file's decoding error in its reader's terms:
// the line and column of a syntax error, the key of a wrong type, the
// keys there are for an unknown one.
func describeJSON(b []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(b, syn.Offset-1) // Offset is just past the bad byte
		return fmt.Sprintf("line %d, column %d: %v", line, col, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too soon (a missing } or \")"
	case errors.As(err, &typ) && typ.Field == "models":
		return fmt.Sprintf(`"models" is a %s: want an object, {"network-id": "backend-model", …}, e.g. {"c0mpute-pro": "qwen3:8b"}`, typ.Value)
	case errors.As(err, &typ):
		for _, st := range settings {
			if st.key == typ.Field {
				return fmt.Sprintf("%q is a %s: want %s", typ.Field, typ.Value, st.want)
			}
		}
		return fmt.Sprintf("%q is a %s, which it cannot be", typ.Field, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		var keys []string
		for _, st := range settings {
			keys = append(keys, st.key)
		}
		keys = append(keys, "backend_key", "developer_role", "workflow", "image_models", "shard", "shard_memory", "shard_uplink")
		slices.Sort(keys)
		return fmt.Sprintf("unknown key %s; the keys are %s", strings.TrimPrefix(err.Error(), "json: unknown field "), strings.Join(keys, ", "))
	}
	return err.Error()
}

// position is the 1-based line and column of byte offset off in b.
func position(b []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off && i < int64(len(b)); i++ {
		if b[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
