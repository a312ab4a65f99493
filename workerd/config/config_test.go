package config_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/config"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func modelsString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// TestPrecedence sets every setting in every combination of sources and
// checks the highest one wins: file < env < flags.
func TestPrecedence(t *testing.T) {
	const (
		file = iota
		envL
		flagL
	)
	fields := []struct {
		flag, env, json string
		vals            [3]string // file, env, flag
		get             func(config.Config) string
	}{
		{"relay", config.EnvRelayURL, "relay_url", [3]string{"ws://file:1/", "ws://env:2/", "wss://flag:3/"}, func(c config.Config) string { return c.RelayURL }},
		{"token", config.EnvToken, "token", [3]string{"cwt_file", "cwt_env", "cwt_flag"}, func(c config.Config) string { return c.Token }},
		{"key", config.EnvKeyFile, "key_file", [3]string{"/file/k.json", "/env/k.json", "/flag/k.json"}, func(c config.Config) string { return c.KeyFile }},
		{"backend", config.EnvBackend, "backend", [3]string{"openai", "ollama", "openai"}, func(c config.Config) string { return c.Backend }},
		{"backend-url", config.EnvBackendURL, "backend_url", [3]string{"http://file:1", "http://env:2", "http://flag:3"}, func(c config.Config) string { return c.BackendURL }},
		{"backend-key", config.EnvBackendKey, "backend_key", [3]string{"kfile", "kenv", "kflag"}, func(c config.Config) string { return c.BackendKey }},
		{"log-level", config.EnvLogLevel, "log_level", [3]string{"warn", "debug", "error"}, func(c config.Config) string { return c.LogLevel }},
		{"models", config.EnvModels, "models", [3]string{"a=file", "b=env,c=env", "d=flag"}, func(c config.Config) string { return modelsString(c.Models) }},
	}
	names := [3]string{"file", "env", "flags"}
	for mask := 1; mask < 8; mask++ {
		var used []string
		for l := range 3 {
			if mask&(1<<l) != 0 {
				used = append(used, names[l])
			}
		}
		t.Run(strings.Join(used, "+"), func(t *testing.T) {
			home := t.TempDir()
			args := []string{"--home", home}
			vars := map[string]string{}
			fileBody := map[string]any{}
			for _, f := range fields {
				if mask&(1<<file) != 0 {
					if f.json == "models" {
						m, _ := config.ParseModels(f.vals[file])
						fileBody[f.json] = m
					} else {
						fileBody[f.json] = f.vals[file]
					}
				}
				if mask&(1<<envL) != 0 {
					vars[f.env] = f.vals[envL]
				}
				if mask&(1<<flagL) != 0 {
					args = append(args, "--"+f.flag, f.vals[flagL])
				}
			}
			if mask&(1<<file) != 0 {
				b, _ := json.Marshal(fileBody)
				writeFile(t, filepath.Join(home, "workerd.json"), string(b)) // the default file
			}
			c, err := config.Load(args, env(vars))
			if err != nil {
				t.Fatal(err)
			}
			top := 0
			for l := range 3 {
				if mask&(1<<l) != 0 {
					top = l
				}
			}
			for _, f := range fields {
				if got := f.get(c); got != f.vals[top] {
					t.Errorf("%s = %q, want %q (from %s)", f.flag, got, f.vals[top], names[top])
				}
			}
			if c.Home != home {
				t.Errorf("home %q", c.Home)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	home := t.TempDir() // no workerd.json: a missing default file is fine
	c, err := config.Load([]string{"--relay", "ws://127.0.0.1:4000/", "--token", "cwt_x"},
		env(map[string]string{config.EnvHome: home}))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{
		Home:       home,
		RelayURL:   "ws://127.0.0.1:4000/",
		Token:      "cwt_x",
		KeyFile:    filepath.Join(home, "worker-key.json"),
		Backend:    "ollama",
		BackendURL: "http://127.0.0.1:11434",
		LogLevel:   "info",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestDefaultHome(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	c, err := config.Load([]string{"--relay", "ws://r/", "--token", "cwt_x"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(os.Getenv("HOME"), ".c0mpute"); c.Home != want || config.DefaultHome() != want {
		t.Errorf("home %q, DefaultHome %q, want %q", c.Home, config.DefaultHome(), want)
	}
}

func TestOllamaURL(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"", "http://127.0.0.1:11434"},
		{":11434", "http://127.0.0.1:11434"},
		{":8000", "http://127.0.0.1:8000"},
		{"0.0.0.0:1234", "http://127.0.0.1:1234"},
		{"0.0.0.0", "http://127.0.0.1:11434"},
		{"host:1", "http://host:1"},
		{"gpu-box", "http://gpu-box:11434"},
		{"[::1]:5000", "http://[::1]:5000"},
		{"http://x:2/", "http://x:2"},
		{"https://ollama.example", "https://ollama.example"},
		{" 10.0.0.2:11434 ", "http://10.0.0.2:11434"},
	} {
		if got := config.OllamaURL(tc.host); got != tc.want {
			t.Errorf("OllamaURL(%q) = %q, want %q", tc.host, got, tc.want)
		}
		// Load uses it for the ollama backend when no URL is set.
		c, err := config.Load([]string{"--home", t.TempDir(), "--relay", "ws://r/", "--token", "cwt_x"},
			env(map[string]string{config.EnvOllamaHost: tc.host}))
		if err != nil || c.BackendURL != tc.want {
			t.Errorf("OLLAMA_HOST=%q: backend URL %q (%v), want %q", tc.host, c.BackendURL, err, tc.want)
		}
	}
}

func TestParseModels(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"llama3.2", map[string]string{"llama3.2": "llama3.2"}, false},
		{"a=b,c", map[string]string{"a": "b", "c": "c"}, false},
		{" a = b , ,c=qwen2.5:7b ", map[string]string{"a": "b", "c": "qwen2.5:7b"}, false},
		{"=b", nil, true},
		{"a=", nil, true},
		{"a=b,=", nil, true},
	} {
		got, err := config.ParseModels(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseModels(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestConfigFile(t *testing.T) {
	c, err := config.Load([]string{"--home", t.TempDir(), "--config", "testdata/workerd.json"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.RelayURL != "wss://relay.example.net/" || c.Backend != "openai" || c.BackendKey != "sk-local" ||
		c.KeyFile != "/var/lib/c0mpute/key.json" || c.LogLevel != "debug" ||
		!reflect.DeepEqual(c.Models, map[string]string{"llama3.2": "llama-3.2-3b-instruct", "qwen": "qwen2.5:7b"}) {
		t.Errorf("from testdata/workerd.json: %+v", c)
	}

	// An explicit --config wins over the home's default file.
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "workerd.json"), `{"relay_url":"ws://home-file/","token":"cwt_home"}`)
	c, err = config.Load([]string{"--home", home, "--config", "testdata/workerd.json"}, env(nil))
	if err != nil || c.Token != "cwt_fromfile" {
		t.Errorf("explicit --config: token %q, %v", c.Token, err)
	}
	c, err = config.Load([]string{"--home", home}, env(nil))
	if err != nil || c.Token != "cwt_home" {
		t.Errorf("default file: token %q, %v", c.Token, err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/errors.golden")

// TestErrors: every configuration mistake is refused with a message that
// names the flag, the variable and (when it came from one) the file key,
// and what would be valid. The messages are in testdata/errors.golden (go
// test ./workerd/config -run TestErrors -update rewrites it).
func TestErrors(t *testing.T) {
	ok := []string{"--relay", "ws://relay/", "--token", "cwt_x"}
	// shard is a valid ring member; $HOME in an argument is the case's
	// home folder, which holds junk.gguf (not a GGUF file) and
	// truncated.gguf (a real one cut short in its first metadata key).
	shard := append([]string{"--backend", "builtin", "--shard", "--shard-memory", "8Gi", "--shard-listen", "127.0.0.1:7420"}, ok...)
	model, err := testmodel.Bytes(testmodel.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string // written as <home>/workerd.json when set
	}{
		{"relay URL not a WebSocket", []string{"--relay", "http://relay/", "--token", "cwt_x"}, nil, ""},
		{"relay URL not a URL", []string{"--relay", "relay.example", "--token", "cwt_x"}, nil, ""},
		{"no relay", []string{"--token", "cwt_x"}, nil, ""},
		{"token without cwt_", []string{"--relay", "ws://relay/", "--token", "abc"}, nil, ""},
		{"token in the file without cwt_", []string{"--relay", "ws://relay/"}, nil, `{"token":"sk-c0mpute-abc"}`},
		{"no token", []string{"--relay", "ws://relay/"}, nil, ""},
		{"unknown backend", append([]string{"--backend", "vllm", "--backend-url", "http://127.0.0.1:8000/v1"}, ok...), nil, ""},
		{"openai without URL", append([]string{"--backend", "openai"}, ok...), nil, ""},
		{"builtin without a GGUF file", append([]string{"--backend", "builtin"}, ok...), nil, ""},
		{"shard with ollama", append([]string{"--shard", "--shard-memory", "8Gi", "--shard-listen", "127.0.0.1:7420"}, ok...), nil, ""},
		{"shard without memory", append([]string{"--backend", "builtin", "--shard", "--shard-listen", "127.0.0.1:7420"}, ok...), nil, ""},
		{"shard memory not a number", append([]string{"--backend", "builtin", "--shard", "--shard-memory", "lots"}, ok...), nil, ""},
		{"shard without listen", append([]string{"--backend", "builtin", "--shard", "--shard-memory", "8Gi"}, ok...), nil, ""},
		{"shard listening everywhere, nothing advertised", append([]string{"--backend", "builtin", "--shard", "--shard-memory", "8Gi", "--shard-listen", "0.0.0.0:7420"}, ok...), nil, ""},
		{"shard advertise not host:port", append([]string{"--backend", "builtin", "--shard", "--shard-memory", "8Gi", "--shard-listen", "127.0.0.1:7420", "--shard-advertise", "example.com"}, ok...), nil, ""},
		{"bad backend URL", append([]string{"--backend-url", "not a url"}, ok...), nil, ""},
		{"bad log level", ok, map[string]string{config.EnvLogLevel: "loud"}, ""},
		{"bad models", ok, map[string]string{config.EnvModels: "a=b,=c"}, ""},
		{"unknown JSON key", ok, nil, `{"relay":"ws://x/"}`},
		{"malformed JSON", ok, nil, "{\n  \"token\": \"cwt_x\"\n  \"relay_url\": \"ws://x/\"\n}"},
		{"truncated JSON", ok, nil, `{"token":`},
		{"models as a string", ok, nil, `{"models":"a=b"}`},
		{"unknown flag", append([]string{"--nope"}, ok...), nil, ""},
		{"stray argument", append([]string{"serve"}, ok...), nil, ""},
		{"missing explicit config file", append([]string{"--config", "/does/not/exist.json"}, ok...), nil, ""},
		{"image models without openai", append([]string{"--image-models", "sdxl"}, ok...), nil, ""},
		{"workflow without comfyui", append([]string{"--workflow", "/does/not/matter.json"}, ok...), nil, ""},
		{"comfyui workflow missing", append([]string{"--backend", "comfyui", "--backend-url", "http://127.0.0.1:8188", "--workflow", "/does/not/exist.json"}, ok...), nil, ""},
		{"comfyui workflow without placeholders", append([]string{"--backend", "comfyui", "--backend-url", "http://127.0.0.1:8188"}, ok...),
			map[string]string{config.EnvWorkflow: "testdata/workflow-no-placeholders.json"}, ""},
		{"draft without shard", append([]string{"--draft", "lookup"}, ok...), nil, ""},
		{"draft in the file without shard", ok, nil, `{"draft":"none"}`},
		{"draft in the file not a string", shard, nil, `{"draft":3}`},
		{"draft with no drafter", append([]string{"--draft", "qwen="}, shard...), nil, ""},
		{"draft with two defaults", append([]string{"--draft", "lookup,none"}, shard...), nil, ""},
		{"draft naming a model twice", shard, map[string]string{config.EnvDraft: "qwen=none, qwen=lookup"}, ""},
		{"draft model missing", append([]string{"--draft", "/does/not/exist.gguf"}, shard...), nil, ""},
		{"draft model of one model missing", append([]string{"--draft", "lookup,qwen=/does/not/exist.gguf"}, shard...), nil, ""},
		{"draft model a folder", append([]string{"--draft", "$HOME"}, shard...), nil, ""},
		{"draft model not a GGUF file", shard, map[string]string{config.EnvDraft: "qwen=$HOME/junk.gguf"}, ""},
		{"draft model truncated", append([]string{"--draft", "$HOME/truncated.gguf"}, shard...), nil, ""},
	}
	var got strings.Builder
	for _, tc := range cases {
		home := t.TempDir()
		if tc.file != "" {
			writeFile(t, filepath.Join(home, "workerd.json"), tc.file)
		}
		writeFile(t, filepath.Join(home, "junk.gguf"), "not a model\n")
		writeFile(t, filepath.Join(home, "truncated.gguf"), string(model[:40]))
		vars := map[string]string{}
		for k, v := range tc.env {
			vars[k] = strings.ReplaceAll(v, "$HOME", home)
		}
		args := []string{"--home", home}
		for _, a := range tc.args {
			args = append(args, strings.ReplaceAll(a, "$HOME", home))
		}
		c, err := config.Load(args, env(vars))
		if err == nil {
			t.Errorf("%s: no error; config %+v", tc.name, c)
			continue
		}
		fmt.Fprintf(&got, "# %s\n%s\n\n", tc.name, strings.ReplaceAll(err.Error(), home, "$HOME"))
	}
	const golden = "testdata/errors.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("messages differ from %s (-update rewrites it):\n%s", golden, got.String())
	}
}

func ExampleOllamaURL() {
	fmt.Println(config.OllamaURL("0.0.0.0:11434"))
	// Output: http://127.0.0.1:11434
}

func TestDeveloperRole(t *testing.T) {
	home := t.TempDir()
	base := []string{"--home", home, "--relay", "ws://r/", "--token", "cwt_x", "--backend", "openai", "--backend-url", "http://b/"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--developer-role"}, nil, true},
		{"env", nil, map[string]string{config.EnvDeveloperRole: "1"}, true},
	} {
		cfg, err := config.Load(append(append([]string{}, base...), c.args...), func(k string) string { return c.env[k] })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.DeveloperRole != c.want {
			t.Errorf("%s: developer role %v, want %v", c.name, cfg.DeveloperRole, c.want)
		}
	}
}

func TestImageSettings(t *testing.T) {
	home := t.TempDir()
	base := []string{"--home", home, "--relay", "ws://r/", "--token", "cwt_x"}
	cfg, err := config.Load(append(base, "--backend", "openai", "--backend-url", "http://b/"),
		func(k string) string { return map[string]string{config.EnvImageModels: "sdxl, flux-schnell,"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.ImageModels, []string{"sdxl", "flux-schnell"}) {
		t.Errorf("image models %q", cfg.ImageModels)
	}
	workflow := filepath.Join(home, "wf.json")
	writeFile(t, workflow, `{
	 "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "{{checkpoint}}"}},
	 "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{prompt}}", "clip": ["1", 1]}},
	 "3": {"class_type": "EmptyLatentImage", "inputs": {"width": "{{width}}", "height": "{{height}}", "batch_size": 1}},
	 "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}
	}`)
	cfg, err = config.Load(append(base, "--backend", "comfyui", "--backend-url", "http://127.0.0.1:8188", "--workflow", workflow), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend != "comfyui" || cfg.Workflow != workflow {
		t.Errorf("config %+v", cfg)
	}
}
