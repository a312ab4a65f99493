// Package config is workerd's configuration: defaults, then a JSON config
// file, then environment variables, then flags — each later source wins.
// It is validated once at start-up and fails with a message that says which
// setting is wrong.
package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-playground/validator/v10"
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
	// Backend is "ollama", "openai" (any OpenAI-compatible server) or
	// "builtin" (workerd's own engine on a GGUF file).
	Backend string `json:"backend" validate:"required,oneof=ollama openai builtin"`
	// BackendURL is the inference server's base URL (not used by builtin).
	BackendURL string `json:"backend_url" validate:"required_unless=Backend builtin,omitempty,url"`
	// GGUF is the model file the builtin backend serves, under its file
	// name without ".gguf".
	GGUF string `json:"gguf,omitempty" validate:"required_if=Backend builtin"`
	// BackendKey is an optional API key for an OpenAI-compatible server.
	BackendKey string `json:"backend_key,omitempty"`
	// DeveloperRole passes developer messages to an OpenAI-compatible
	// server as they are (its template knows the role, as gpt-oss on vLLM
	// does) instead of as system messages.
	DeveloperRole bool `json:"developer_role,omitempty"`
	// Models maps network model ids to backend model names; empty serves
	// every backend model under its own name.
	Models map[string]string `json:"models,omitempty" validate:"dive,keys,required,max=128,endkeys,required"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level" validate:"oneof=debug info warn error"`
}

// Environment variables.
const (
	EnvHome          = "C0MPUTE_HOME"
	EnvRelayURL      = "C0MPUTE_RELAY_URL"
	EnvToken         = "C0MPUTE_WORKER_TOKEN"
	EnvKeyFile       = "C0MPUTE_WORKER_KEY"
	EnvBackend       = "C0MPUTE_BACKEND"
	EnvBackendURL    = "C0MPUTE_BACKEND_URL"
	EnvBackendKey    = "C0MPUTE_BACKEND_KEY"
	EnvGGUF          = "C0MPUTE_GGUF"
	EnvModels        = "C0MPUTE_MODELS"
	EnvDeveloperRole = "C0MPUTE_DEVELOPER_ROLE"
	EnvLogLevel      = "C0MPUTE_LOG_LEVEL"
	EnvOllamaHost    = "OLLAMA_HOST"
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
			return nil, fmt.Errorf("models: %q is not id=backend-model", part)
		}
		out[id] = name
	}
	return out, nil
}

// Load builds the configuration from the file, env and the flags in args.
// getenv is os.Getenv outside tests.
func Load(args []string, getenv func(string) string) (Config, error) {
	flags := flag.NewFlagSet("workerd", flag.ContinueOnError)
	var (
		home       = flags.String("home", "", "state folder (env "+EnvHome+", default ~/.c0mpute)")
		file       = flags.String("config", "", "JSON config file (default <home>/workerd.json if present)")
		relay      = flags.String("relay", "", "relay WebSocket URL (env "+EnvRelayURL+")")
		token      = flags.String("token", "", "worker token cwt_… (env "+EnvToken+")")
		keyFile    = flags.String("key", "", "identity keypair file (env "+EnvKeyFile+", default <home>/worker-key.json)")
		backend    = flags.String("backend", "", "ollama, openai or builtin (env "+EnvBackend+", default ollama)")
		ggufPath   = flags.String("gguf", "", "GGUF model file for the builtin backend (env "+EnvGGUF+")")
		backendURL = flags.String("backend-url", "", "inference server URL (env "+EnvBackendURL+"; ollama default from "+EnvOllamaHost+")")
		backendKey = flags.String("backend-key", "", "API key for an OpenAI-compatible server (env "+EnvBackendKey+")")
		developer  = flags.Bool("developer-role", false, "send developer messages as they are to an OpenAI-compatible server (env "+EnvDeveloperRole+"=1)")
		models     = flags.String("models", "", "id=backend-model,… to serve (env "+EnvModels+"; default: every backend model)")
		logLevel   = flags.String("log-level", "", "debug, info, warn or error (env "+EnvLogLevel+")")
	)
	if err := flags.Parse(args); err != nil {
		return Config{}, err
	}
	c := Config{Backend: "ollama", LogLevel: "info"}
	c.Home = first(*home, getenv(EnvHome), DefaultHome())
	path := first(*file, filepath.Join(c.Home, "workerd.json"))
	switch b, err := os.ReadFile(path); {
	case err == nil:
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
	case *file != "" || !errors.Is(err, fs.ErrNotExist):
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	c.RelayURL = first(*relay, getenv(EnvRelayURL), c.RelayURL)
	c.Token = first(*token, getenv(EnvToken), c.Token)
	c.KeyFile = first(*keyFile, getenv(EnvKeyFile), c.KeyFile, filepath.Join(c.Home, "worker-key.json"))
	c.Backend = first(*backend, getenv(EnvBackend), c.Backend)
	c.BackendKey = first(*backendKey, getenv(EnvBackendKey), c.BackendKey)
	c.GGUF = first(*ggufPath, getenv(EnvGGUF), c.GGUF)
	c.LogLevel = first(*logLevel, getenv(EnvLogLevel), c.LogLevel)
	defaultURL := ""
	if c.Backend == "ollama" {
		defaultURL = OllamaURL(getenv(EnvOllamaHost))
	}
	c.BackendURL = first(*backendURL, getenv(EnvBackendURL), c.BackendURL, defaultURL)
	c.DeveloperRole = *developer || getenv(EnvDeveloperRole) == "1" || c.DeveloperRole
	if m := first(*models, getenv(EnvModels)); m != "" {
		parsed, err := ParseModels(m)
		if err != nil {
			return Config{}, err
		}
		c.Models = parsed
	}
	if err := validator.New(validator.WithRequiredStructEnabled()).Struct(c); err != nil {
		return Config{}, fmt.Errorf("workerd configuration: %w", err)
	}
	return c, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
