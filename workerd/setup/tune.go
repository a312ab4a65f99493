package setup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"

	"github.com/c0mpute/c0mpute/workerd/hardware"
)

// Shape is what sizing the context needs of a model: its GGUF metadata as
// Ollama's /api/show reports it under model_info ("<arch>.…" keys).
type Shape struct {
	Arch string
	// TrainedContext is <arch>.context_length: num_ctx never exceeds it.
	TrainedContext int64
	Layers         int64 // <arch>.block_count
	KVHeads        int64 // <arch>.attention.head_count_kv (else head_count)
	// KeyLength and ValueLength are the per-head sizes
	// (<arch>.attention.key_length/value_length, else embedding_length /
	// head_count).
	KeyLength, ValueLength int64
}

// ShapeFromInfo reads a Shape from /api/show's model_info.
func ShapeFromInfo(info map[string]any) (Shape, error) {
	arch, _ := info["general.architecture"].(string)
	if arch == "" || len(arch) > 64 {
		return Shape{}, errors.New("the model's metadata has no general.architecture")
	}
	num := func(key string) int64 {
		f, ok := info[arch+"."+key].(float64)
		if !ok || f < 0 || f > 1<<40 || f != math.Trunc(f) {
			return 0
		}
		return int64(f)
	}
	s := Shape{Arch: arch, TrainedContext: num("context_length"), Layers: num("block_count"),
		KVHeads: num("attention.head_count_kv"), KeyLength: num("attention.key_length"), ValueLength: num("attention.value_length")}
	heads := num("attention.head_count")
	if s.KVHeads == 0 {
		s.KVHeads = heads
	}
	if s.KeyLength == 0 && heads > 0 {
		s.KeyLength = num("embedding_length") / heads
	}
	if s.ValueLength == 0 {
		s.ValueLength = s.KeyLength
	}
	for k, v := range map[string]int64{"context_length": s.TrainedContext, "block_count": s.Layers,
		"attention.head_count_kv": s.KVHeads, "attention key length": s.KeyLength} {
		if v <= 0 {
			return Shape{}, fmt.Errorf("the model's metadata has no usable %s.%s", arch, k)
		}
	}
	return s, nil
}

// kvBytes are the bytes per cached element, in thirty-seconds, for each
// of Ollama's KV cache types (ggml's block sizes: q8_0 stores 32 values in
// 34 bytes, q4_0 in 18).
var kvBytes = map[string]int64{"f16": 64, "q8_0": 34, "q4_0": 18}

// KVBytesPerToken is the KV cache's size for one token of context.
func (s Shape) KVBytesPerToken(cacheType string) int64 {
	per32, ok := kvBytes[cacheType]
	if !ok {
		per32 = kvBytes["f16"]
	}
	return s.Layers * s.KVHeads * (s.KeyLength + s.ValueLength) * per32 / 32
}

// Sizing constants.
const (
	// headroomPercent of free memory is left for what is neither weights
	// nor KV cache: the compute graph's buffers, the CUDA/Metal context,
	// and on a CPU the rest of the system.
	headroomPercent = 10
	// ctxStep rounds num_ctx down to a multiple of 256, as llama.cpp pads
	// its KV cache.
	ctxStep = 256
	// minUsefulCtx is the smallest context worth serving: a chat with a
	// system prompt and a few turns. A model trained on less gets its
	// trained context.
	minUsefulCtx = 2048
)

// NumCtx sizes the context from the memory left after the weights: the
// largest multiple of 256 tokens whose KV cache fits in free memory less
// the headroom and the weights, capped at the trained context.
func NumCtx(freeMiB, weightBytes int64, s Shape, cacheType string) (int64, error) {
	budget := freeMiB*hardware.MiB/100*(100-headroomPercent) - weightBytes
	per := s.KVBytesPerToken(cacheType)
	if per <= 0 {
		return 0, errors.New("the model's KV cache size is unknown")
	}
	want := min(int64(minUsefulCtx), s.TrainedContext)
	if budget <= 0 {
		return 0, fmt.Errorf("the weights (%s) need more than the %s free, less %d%% headroom: free memory, or pick a smaller model",
			mibString(weightBytes), hardware.GiB(freeMiB), headroomPercent)
	}
	if budget < want*per {
		return 0, fmt.Errorf("%s free holds the weights (%s) but not a %d-token context (%s more): free memory, or pick a smaller model",
			hardware.GiB(freeMiB), mibString(weightBytes), want, mibString(want*per-budget))
	}
	n := min(budget/per, s.TrainedContext)
	if n >= ctxStep {
		n -= n % ctxStep
	}
	return n, nil
}

func mibString(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	if b >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
}

// ServerSettings is what setup found of the Ollama server's flash
// attention and KV cache settings (environment variables of the server,
// which no API reports).
type ServerSettings struct {
	// Known says the settings were read; otherwise Why says why not.
	Known bool
	Why   string
	// Where is how the server is run: "systemd", "launchd" or "" (by
	// hand, or unknown).
	Where          string
	FlashAttention bool
	// KVCacheType is OLLAMA_KV_CACHE_TYPE ("f16" when unset). Ollama
	// quantizes the cache only with flash attention on.
	KVCacheType string
}

// EffectiveKVType is the cache type the server uses.
func (s ServerSettings) EffectiveKVType() string {
	if !s.Known || !s.FlashAttention || s.KVCacheType == "" {
		return "f16"
	}
	if _, ok := kvBytes[s.KVCacheType]; !ok {
		return "f16"
	}
	return s.KVCacheType
}

// DetectServer reads the settings of the Ollama at baseURL where it can:
// the ollama systemd unit's Environment on Linux, launchctl's environment
// (which the Ollama app reads) on macOS. A server on another machine, or
// one started by hand, cannot be read.
func DetectServer(ctx context.Context, r hardware.Runner, goos, baseURL string) ServerSettings {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ServerSettings{Why: "the backend URL is not a URL"}
	}
	switch h := u.Hostname(); h {
	case "127.0.0.1", "localhost", "::1":
	default:
		return ServerSettings{Why: "Ollama runs on " + h + ", not this machine"}
	}
	switch goos {
	case "linux":
		out, err := r.Run(ctx, "systemctl", "show", "ollama.service", "--property=LoadState,ActiveState,Environment")
		if err != nil {
			return ServerSettings{Why: err.Error()}
		}
		env, loaded := ParseSystemdShow(out)
		if !loaded {
			return ServerSettings{Why: "Ollama is not running as the ollama systemd service (started by hand?)"}
		}
		return ServerSettings{Known: true, Where: "systemd", FlashAttention: truthy(env["OLLAMA_FLASH_ATTENTION"]),
			KVCacheType: env["OLLAMA_KV_CACHE_TYPE"]}
	case "darwin":
		s := ServerSettings{Known: true, Where: "launchd"}
		for _, v := range []string{"OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE"} {
			out, err := r.Run(ctx, "launchctl", "getenv", v)
			if err != nil {
				return ServerSettings{Why: err.Error()}
			}
			val := strings.TrimSpace(string(out))
			if v == "OLLAMA_FLASH_ATTENTION" {
				s.FlashAttention = truthy(val)
			} else {
				s.KVCacheType = val
			}
		}
		return s
	}
	return ServerSettings{Why: "no way to read a server's settings on " + goos}
}

// truthy is Ollama's reading of a boolean variable (strconv.ParseBool).
func truthy(s string) bool {
	switch strings.TrimSpace(s) {
	case "1", "t", "T", "TRUE", "true", "True":
		return true
	}
	return false
}

// ParseSystemdShow reads `systemctl show UNIT
// --property=LoadState,ActiveState,Environment` (systemctl(1): one
// KEY=VALUE line per property; Environment is space-separated
// assignments, each quoted when it holds spaces) and returns the unit's
// environment and whether the unit is loaded and active.
func ParseSystemdShow(out []byte) (map[string]string, bool) {
	env := map[string]string{}
	loaded, active := false, false
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "LoadState":
			loaded = v == "loaded"
		case "ActiveState":
			active = v == "active"
		case "Environment":
			for _, a := range splitQuoted(v) {
				if name, val, ok := strings.Cut(a, "="); ok {
					env[name] = val
				}
			}
		}
	}
	return env, loaded && active
}

// splitQuoted splits on spaces outside double quotes and drops the quotes.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// EnableAdvice is how to turn on flash attention and the q8_0 KV cache
// for the server, for the way it runs.
func EnableAdvice(s ServerSettings) string {
	switch s.Where {
	case "systemd":
		return `  sudo systemctl edit ollama.service      # add these lines, then save:
    [Service]
    Environment="OLLAMA_FLASH_ATTENTION=1"
    Environment="OLLAMA_KV_CACHE_TYPE=q8_0"
  sudo systemctl restart ollama`
	case "launchd":
		return `  launchctl setenv OLLAMA_FLASH_ATTENTION 1
  launchctl setenv OLLAMA_KV_CACHE_TYPE q8_0
  then quit Ollama (menu bar) and open it again`
	}
	return `  Linux, the ollama systemd service:
    sudo systemctl edit ollama.service   # [Service] Environment="OLLAMA_FLASH_ATTENTION=1" Environment="OLLAMA_KV_CACHE_TYPE=q8_0"
    sudo systemctl restart ollama
  macOS, the Ollama app:
    launchctl setenv OLLAMA_FLASH_ATTENTION 1; launchctl setenv OLLAMA_KV_CACHE_TYPE q8_0   # then restart Ollama
  by hand:
    OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve`
}
