package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// words runs a pre-tokenizer and maps its byte-level words back to text.
func words(p pretokenizer, s string) []string {
	var out []string
	for _, w := range preTokenize(p, s) {
		out = append(out, string(decodeByteLevel(w)))
	}
	return out
}

// TestPreTokenize checks splits worked out by hand from each pattern.
func TestPreTokenize(t *testing.T) {
	cases := []struct {
		pre  string
		in   string
		want []string
	}{
		{"llama-bpe", "Hello world", []string{"Hello", " world"}},
		{"llama-bpe", "I'm 12345 ok", []string{"I", "'m", " ", "123", "45", " ok"}},
		{"llama-bpe", "I'M DON'T", []string{"I", "'M", " DON", "'T"}},
		{"llama-bpe", "a\n\nb", []string{"a", "\n\n", "b"}},
		{"llama-bpe", "x   y", []string{"x", "  ", " y"}},
		{"llama-bpe", "!!!\n\nx", []string{"!!!\n\n", "x"}},
		{"llama-bpe", "  \n  \n  x", []string{"  \n  \n", " ", " x"}},
		{"llama-bpe", "(hi)", []string{"(hi", ")"}},
		{"llama-bpe", "end ", []string{"end", " "}},
		{"llama-bpe", "日本語 テスト", []string{"日本語", " テスト"}},
		{"qwen2", "12345 a1", []string{"1", "2", "3", "4", "5", " a", "1"}},
		{"gpt-2", "Hello  world", []string{"Hello", " ", " world"}},
		{"gpt-2", "123abc", []string{"123", "abc"}},
		{"gpt-2", "I'M it's", []string{"I", "'", "M", " it", "'s"}},
		{"gpt-2", "a\n\nb", []string{"a", "\n", "\n", "b"}}, // \s+(?!\S) leaves one
		{"default", "a.b,c", []string{"a", ".", "b", ",", "c"}},
		{"default", "x 12345", []string{"x", " ", "123", "45"}},
		{"starcoder", "ab12 c", []string{"ab", "1", "2", " c"}},
		{"gpt-4o", "HELLOworld helloWorld", []string{"HELLOworld", " hello", "World"}},
		{"gpt-4o", "ÉCOLE x", []string{"É", "COLE", " x"}}, // non-ASCII letters count as both cases
		{"tekken", "don't 12", []string{"don", "'t", " ", "1", "2"}},
		{"bloom", "hi, there!", []string{"hi", ",", " there", "!"}},
	}
	for _, c := range cases {
		p, err := preFor(c.pre)
		if err != nil {
			t.Fatal(err)
		}
		if got := words(p.split, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s %q: got %q, want %q", c.pre, c.in, got, c.want)
		}
	}
}

// tinySPM is a SentencePiece vocabulary small enough to reason about.
func tinySPM(t *testing.T) *Tokenizer {
	t.Helper()
	toks := []string{"<unk>", "<s>", "</s>"}
	types := []TokenType{TypeUnknown, TypeControl, TypeControl}
	scores := []float32{0, 0, 0}
	for b := range 256 {
		toks = append(toks, "<0x"+strings.ToUpper(string("0123456789abcdef"[b>>4]))+strings.ToUpper(string("0123456789abcdef"[b&15]))+">")
		types = append(types, TypeByte)
		scores = append(scores, 0)
	}
	for _, p := range []struct {
		s     string
		score float32
	}{{"▁", -1}, {"a", -2}, {"b", -2}, {"ab", -3}, {"▁ab", -4}, {"▁a", -5}, {"<user>", 0}} {
		toks = append(toks, p.s)
		scores = append(scores, p.score)
		types = append(types, TypeNormal)
	}
	types[len(types)-1] = TypeUserDefined
	tok, err := New(Vocab{Model: ModelSentencePiece, Tokens: toks, Scores: scores, Types: types})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSPM(t *testing.T) {
	tok := tinySPM(t)
	id := func(s string) int32 {
		i, ok := tok.ID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	cases := []struct {
		in             string
		special, parse bool
		want           []int32
		decoded        string
		comment        string
	}{
		// "▁a" (-5) loses to "ab" (-3), then "▁ab" (-4) joins.
		{"ab", false, false, []int32{id("▁ab")}, " ab", "merge by score"},
		{"ab", true, false, []int32{1, id("▁ab")}, "<s> ab", "BOS added"},
		{"a", false, false, []int32{id("▁a")}, " a", ""},
		{"é", false, false, []int32{id("▁"), id("<0xC3>"), id("<0xA9>")}, " é", "byte fallback"},
		{"<s>b", false, true, []int32{1, id("▁"), id("b")}, "<s> b", "control token parsed"},
		{"a<user>b", false, false, []int32{id("▁a"), id("<user>"), id("▁"), id("b")}, " a<user> b", "user-defined always split; space prefix after it"},
		{"", true, true, []int32{1}, "<s>", "empty text"},
	}
	for _, c := range cases {
		got := tok.Encode(c.in, c.special, c.parse)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", c.comment, c.in, got, c.want)
		}
		if d := tok.Decode(got); d != c.decoded {
			t.Errorf("%s: Decode = %q, want %q", c.comment, d, c.decoded)
		}
	}
	// Not parsed, "<s>" is characters.
	if got := tok.Encode("<s>", false, false); slices.Contains(got, 1) {
		t.Errorf("control token parsed without parseSpecial: %v", got)
	}
}

func TestDecoder(t *testing.T) {
	tok := tinySPM(t)
	b := func(c byte) int32 { return tok.byteToken(c) }
	a, _ := tok.ID("a")
	cases := []struct {
		name string
		ids  []int32
		want []string // per Add
		rest string   // Flush
	}{
		{"3-byte char", []int32{b(0xE6), b(0x97), b(0xA5), a}, []string{"", "", "日", "a"}, ""},
		{"4-byte emoji", []int32{b(0xF0), b(0x9F), b(0x98), b(0x80)}, []string{"", "", "", "😀"}, ""},
		{"unfinished at the end", []int32{a, b(0xC3)}, []string{"a", ""}, "\xc3"},
		{"impossible byte passes", []int32{b(0xFF), a}, []string{"\xff", "a"}, ""},
		{"broken sequence released", []int32{b(0xE6), a}, []string{"", "\xe6a"}, ""},
		{"surrogate lead not held", []int32{b(0xED), b(0xA0)}, []string{"", "\xed\xa0"}, ""},
	}
	for _, c := range cases {
		d := tok.NewDecoder()
		for i, id := range c.ids {
			if got := d.Add(id); got != c.want[i] {
				t.Errorf("%s: Add #%d = %q, want %q", c.name, i, got, c.want[i])
			}
		}
		if got := d.Flush(); got != c.rest {
			t.Errorf("%s: Flush = %q, want %q", c.name, got, c.rest)
		}
	}
}

func TestNewErrors(t *testing.T) {
	toks := []string{"a", "b"}
	cases := map[string]Vocab{
		"unknown model":      {Model: "bert", Tokens: toks},
		"no tokens":          {Model: ModelSentencePiece},
		"scores mismatch":    {Model: ModelSentencePiece, Tokens: toks, Scores: []float32{1}},
		"types mismatch":     {Model: ModelSentencePiece, Tokens: toks, Types: []TokenType{1}},
		"duplicate token":    {Model: ModelSentencePiece, Tokens: []string{"a", "a"}},
		"bpe without merges": {Model: ModelBPE, Tokens: toks},
		"spm with merges":    {Model: ModelSentencePiece, Tokens: toks, Merges: []string{"a b"}},
	}
	for name, v := range cases {
		if _, err := New(v); err == nil || !strings.HasPrefix(err.Error(), "tokenizer:") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestFromMetadataErrors(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{KeyModel: "llama", KeyTokens: []string{"<unk>", "<s>", "</s>", "a"}}
	}
	cases := map[string]func(md map[string]any){
		"no model":            func(md map[string]any) { delete(md, KeyModel) },
		"model not a string":  func(md map[string]any) { md[KeyModel] = 3 },
		"unsupported model":   func(md map[string]any) { md[KeyModel] = "t5" },
		"no tokens":           func(md map[string]any) { delete(md, KeyTokens) },
		"tokens not strings":  func(md map[string]any) { md[KeyTokens] = []int32{1} },
		"token not a string":  func(md map[string]any) { md[KeyTokens] = []any{"a", 2} },
		"scores not floats":   func(md map[string]any) { md[KeyScores] = []string{"x"} },
		"types not integers":  func(md map[string]any) { md[KeyTokenType] = []float32{1} },
		"bos not an integer":  func(md map[string]any) { md[KeyBOS] = "1" },
		"add_bos not a bool":  func(md map[string]any) { md[KeyAddBOS] = 1 },
		"merges not strings":  func(md map[string]any) { md[KeyMerges] = 7 },
		"score count differs": func(md map[string]any) { md[KeyScores] = []float32{0} },
	}
	for name, edit := range cases {
		md := base()
		edit(md)
		if _, err := FromMetadata(md); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Out-of-range ids keep llama.cpp's defaults; []any and other integer
	// kinds are read.
	md := base()
	md[KeyBOS] = uint64(99)
	md[KeyEOS] = uint8(3)
	md[KeyTokenType] = []any{int32(2), int32(3), int32(3), int32(1)}
	md[KeyScores] = []any{float32(0), float64(0), float32(0), float32(-1)}
	tok, err := FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 1 || tok.EOS() != 3 || !tok.IsEOG(3) || tok.IsEOG(2) {
		t.Errorf("BOS %d EOS %d EOG %v", tok.BOS(), tok.EOS(), tok.EOG())
	}
}

func TestEOGDetection(t *testing.T) {
	toks := []string{"a", "b", "<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "ab"}
	tok, err := New(Vocab{Model: ModelBPE, Pre: "qwen2", Tokens: toks, Merges: []string{"a b"}, EOS: ID(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.EOG(); !slices.Equal(got, []int32{2, 3, 4}) {
		t.Errorf("EOG = %v", got)
	}
	// Recognised end-of-turn tokens become control tokens even when typed
	// normal, so they are split out of text.
	if tok.Type(3) != TypeControl {
		t.Errorf("<|im_end|> type %d", tok.Type(3))
	}
	if got := tok.Encode("ab<|im_end|>", false, true); !slices.Equal(got, []int32{5, 3}) {
		t.Errorf("Encode = %v", got)
	}
	if got := tok.Encode("ab<|im_end|>", false, false); slices.Contains(got, 3) {
		t.Errorf("control token parsed without parseSpecial: %v", got)
	}
	if tok.AddBOS() {
		t.Error("qwen2 adds no BOS by default")
	}
}

func TestCptsFromUTF8(t *testing.T) {
	cases := []struct {
		in   string
		want []rune
	}{
		{"aé日😀", []rune{'a', 'é', '日', '😀'}},
		{"\x80a", []rune{0xFFFD, 'a'}},
		{"\xe6\x97", []rune{0xFFFD, 0xFFFD}},
		{"\xed\xa0\x80", []rune{0xD800}}, // surrogates pass, as in llama.cpp
		{"\xf7\xbf\xbf\xbf", []rune{0xFFFD}},
		{"\xf8", []rune{0xFFFD}},
	}
	for _, c := range cases {
		if got := cptsFromUTF8(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q: %U, want %U", c.in, got, c.want)
		}
	}
	// Re-encoding keeps surrogates as their three bytes.
	if got := string(appendCpt(nil, 0xD800)); got != "\xed\xa0\x80" || utf8.ValidString(got) {
		t.Errorf("surrogate encoded as %q", got)
	}
}
