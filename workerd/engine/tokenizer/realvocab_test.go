package tokenizer_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine/tokenizer"
)

// Ollama's module source ships two real vocabularies for its own tests:
// Llama 3.2's (byte-level BPE, 128,000 tokens, 280,147 merges) and
// Gemma 2's (SentencePiece, 256,000 pieces), plus War and Peace. scripts/test
// has the module in the Go module cache, since it builds Ollama from it.
const ollamaModule = "github.com/ollama/ollama@v0.6.5"

func ollamaTestdata(t testing.TB) string {
	t.Helper()
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			testenv.Missing(t, "Ollama module source", "go env GOMODCACHE: "+err.Error())
		}
		cache = strings.TrimSpace(string(out))
	}
	dir := filepath.Join(cache, filepath.FromSlash(ollamaModule), "model", "testdata")
	if _, err := os.Stat(filepath.Join(dir, "llama3.2", "vocab.bpe")); err != nil {
		testenv.Missing(t, "Ollama module source", fmt.Sprintf("%v (go mod download %s)", err, ollamaModule))
	}
	return dir
}

// llama3Metadata is Llama 3's tokenizer metadata: the 128,000 learnt
// tokens and merges from Ollama's testdata, then 256 control tokens laid
// out as Llama 3 lays them out.
func llama3Metadata(t testing.TB, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "llama3.2", "encoder.json"))
	if err != nil {
		t.Fatal(err)
	}
	var enc map[string]int32
	if err := json.Unmarshal(b, &enc); err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, len(enc))
	for s, id := range enc {
		tokens[id] = s
	}
	types := make([]int32, len(tokens), len(tokens)+256)
	for i := range types {
		types[i] = 1
	}
	named := map[int]string{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
		6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
	reserved := 0
	for i := range 256 {
		s, ok := named[i]
		if !ok {
			s = fmt.Sprintf("<|reserved_special_token_%d|>", reserved)
			reserved++
		}
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	f, err := os.Open(filepath.Join(dir, "llama3.2", "vocab.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var merges []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			merges = append(merges, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"tokenizer.ggml.model":         "gpt2",
		"tokenizer.ggml.pre":           "llama-bpe",
		"tokenizer.ggml.tokens":        tokens,
		"tokenizer.ggml.token_type":    types,
		"tokenizer.ggml.merges":        merges,
		"tokenizer.ggml.bos_token_id":  uint32(128000),
		"tokenizer.ggml.eos_token_id":  uint32(128009),
		"tokenizer.ggml.add_bos_token": true,
	}
}

// gemma2Metadata is Gemma 2's SentencePiece vocabulary, read from its
// tokenizer.model (a protobuf ModelProto) in Ollama's testdata, with the
// flags Gemma's GGUF files carry.
func gemma2Metadata(t testing.TB, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "gemma2", "tokenizer.model"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, scores, types, err := sentencePieces(b)
	if err != nil {
		t.Fatalf("gemma2 tokenizer.model: %v", err)
	}
	return map[string]any{
		"tokenizer.ggml.model":            "llama",
		"tokenizer.ggml.tokens":           tokens,
		"tokenizer.ggml.scores":           scores,
		"tokenizer.ggml.token_type":       types,
		"tokenizer.ggml.bos_token_id":     uint32(2),
		"tokenizer.ggml.eos_token_id":     uint32(1),
		"tokenizer.ggml.unknown_token_id": uint32(3),
		"tokenizer.ggml.padding_token_id": uint32(0),
		"tokenizer.ggml.add_bos_token":    true,
		"tokenizer.ggml.add_eos_token":    false,
		"tokenizer.ggml.add_space_prefix": false,
	}
}

// sentencePieces reads the pieces of a SentencePiece ModelProto: field 1,
// each a message of piece (1, string), score (2, float) and type (3,
// enum, NORMAL by default).
func sentencePieces(b []byte) (tokens []string, scores []float32, types []int32, err error) {
	for len(b) > 0 {
		field, wire, val, rest, err := protoField(b)
		if err != nil {
			return nil, nil, nil, err
		}
		b = rest
		if field != 1 || wire != 2 {
			continue
		}
		piece, score, typ := "", float32(0), int32(1)
		for m := val; len(m) > 0; {
			f, w, v, r, err := protoField(m)
			if err != nil {
				return nil, nil, nil, err
			}
			m = r
			switch {
			case f == 1 && w == 2:
				piece = string(v)
			case f == 2 && w == 5:
				score = math.Float32frombits(binary.LittleEndian.Uint32(v))
			case f == 3 && w == 0:
				n, _ := binary.Uvarint(v)
				typ = int32(n)
			}
		}
		tokens, scores, types = append(tokens, piece), append(scores, score), append(types, typ)
	}
	return tokens, scores, types, nil
}

// protoField splits one protobuf field off b; val holds a varint's bytes,
// a fixed value's bytes or a length-delimited payload.
func protoField(b []byte) (field, wire int, val, rest []byte, err error) {
	key, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, nil, nil, errors.New("bad field key")
	}
	b = b[n:]
	field, wire = int(key>>3), int(key&7)
	switch wire {
	case 0:
		_, m := binary.Uvarint(b)
		if m <= 0 {
			return 0, 0, nil, nil, errors.New("bad varint")
		}
		return field, wire, b[:m], b[m:], nil
	case 1, 5:
		size := 8
		if wire == 5 {
			size = 4
		}
		if len(b) < size {
			return 0, 0, nil, nil, errors.New("short fixed field")
		}
		return field, wire, b[:size], b[size:], nil
	case 2:
		l, m := binary.Uvarint(b)
		if m <= 0 || uint64(len(b)-m) < l {
			return 0, 0, nil, nil, errors.New("bad length")
		}
		return field, wire, b[m : m+int(l)], b[m+int(l):], nil
	}
	return 0, 0, nil, nil, fmt.Errorf("wire type %d", wire)
}

// warAndPeace is a spread of paragraphs from the novel (Gutenberg's text,
// CRLF line ends and all), each cut to about 300 bytes on a character
// boundary.
func warAndPeace(t testing.TB, dir string, n int) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "war-and-peace.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Paragraphs end at blank lines (a regexp over the 3 MB is slow under
	// the race detector).
	var paras []string
	start := 0
	text := string(b)
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '\n')
		if j < 0 {
			break
		}
		line := text[i : i+j]
		if strings.TrimRight(line, "\r") == "" {
			if i > start {
				paras = append(paras, strings.TrimRight(text[start:i], "\r\n"))
			}
			start = i + j + 1
		}
		i += j + 1
	}
	var out []string
	for i := 0; i < len(paras) && len(out) < n; i += len(paras)/n + 1 {
		p := paras[i]
		if len(p) > 300 {
			cut := 300
			for cut > 0 && !utf8.RuneStart(p[cut]) {
				cut--
			}
			p = p[:cut]
		}
		if strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
	}
	return out
}

var asciiWord = regexp.MustCompile(`^[a-z]{3,}$`)

// TestOllamaRealVocabs repeats TestOllama's comparison on the real
// Llama 3 and Gemma 2 vocabularies, with the corpus and paragraphs of War
// and Peace. The model files around them are tiny (width 8, one layer).
func TestOllamaRealVocabs(t *testing.T) {
	dir := ollamaTestdata(t)
	paragraphs := 40
	if raceEnabled {
		paragraphs = 8
	}
	texts := append(corpus(t), warAndPeace(t, dir, paragraphs)...)
	for _, v := range []struct {
		name   string
		md     func(testing.TB, string) map[string]any
		prefix string
	}{
		{"llama3", llama3Metadata, "Ġ"},
		{"gemma2", gemma2Metadata, "▁"},
	} {
		t.Run(v.name, func(t *testing.T) {
			start := time.Now()
			md := v.md(t, dir)
			tok, err := tokenizer.FromMetadata(md)
			if err != nil {
				t.Fatal(err)
			}
			if v.name == "llama3" {
				// Llama 3's published tokens for this text.
				if got := tok.Encode("hello world", false, false); !slices.Equal(got, []int32{15339, 1917}) {
					t.Fatalf("hello world = %v, want [15339 1917]", got)
				}
			}
			t.Logf("vocabulary loaded in %v", time.Since(start))
			opts := testmodel.Options{
				Embedding: 8, Heads: 2, FeedForward: 16, Layers: 1, Context: 512,
				Vocabulary: &testmodel.Vocabulary{Metadata: md, Keep: func(_ int, s string) bool {
					w, ok := strings.CutPrefix(s, v.prefix)
					return ok && asciiWord.MatchString(w)
				}},
			}
			name := "tok-real-" + v.name
			srv := ollamatest.TinyModel(t, name, opts)
			t.Logf("model created in Ollama after %v", time.Since(start))
			for _, s := range texts {
				resp, err := generate(srv.URL(), name, s)
				if err != nil {
					t.Fatalf("%q: %v", s, err)
				}
				text := s + resp.Response
				got := tok.Encode(text, false, true)
				if !slices.Equal(got, resp.Context) {
					t.Errorf("%q:\n ours   %v %q\n ollama %v %q", text, got, pieces(tok, got), resp.Context, pieces(tok, resp.Context))
				}
				if n := len(tok.Encode(s, true, true)); n != resp.PromptEvalCount {
					t.Errorf("%q: %d prompt tokens with BOS, ollama counted %d", s, n, resp.PromptEvalCount)
				}
			}
		})
	}
}

// BenchmarkRealVocab: loading the real vocabularies, and encoding 64 KB of
// War and Peace with them (bytes/s reported).
func BenchmarkRealVocab(b *testing.B) {
	dir := ollamaTestdata(b)
	raw, err := os.ReadFile(filepath.Join(dir, "war-and-peace.txt"))
	if err != nil {
		b.Fatal(err)
	}
	text := string(raw[100000 : 100000+64<<10])
	for _, v := range []struct {
		name string
		md   map[string]any
	}{{"llama3", llama3Metadata(b, dir)}, {"gemma2", gemma2Metadata(b, dir)}} {
		b.Run(v.name+"/load", func(b *testing.B) {
			for b.Loop() {
				if _, err := tokenizer.FromMetadata(v.md); err != nil {
					b.Fatal(err)
				}
			}
		})
		tok, err := tokenizer.FromMetadata(v.md)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(v.name+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.Encode(text, true, true)
			}
		})
	}
}
