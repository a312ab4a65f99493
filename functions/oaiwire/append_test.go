package oaiwire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// appendCases are texts on both sides of every escape Marshal makes.
var appendCases = []string{
	"", "w1 ", "hello, world", "é ü 中文 🙂", "\uFFFD literal",
	`"quoted"`, `back\slash`, "<b>&amp;</b>", "a<b", "a>b", "a&b", "\"", "\\", "\x01", "\x7f",
	"tab\tnew\nline\rcr", "\b\f\x00\x1f\x7f",
	"\u2028\u2029", "a\u2028b", "bad \xff utf-8", "cut \xe4\xb8", "\xed\xa0\x80 surrogate",
	"\xf4\x90\x80\x80 past U+10FFFF", "mixed <\xff>\u2029\n",
}

// checkDelta fails t unless AppendDelta writes what Marshal writes for d,
// after a prefix it must leave alone.
func checkDelta(t *testing.T, d oaiwire.Delta) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := oaiwire.AppendDelta([]byte("prefix"), d)
	if !ok {
		t.Fatalf("AppendDelta(%+v) refused a delta without tool calls", d)
	}
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendDelta(%+v)\n got %q\nwant prefix%q", d, got, want)
	}
	s := oaiwire.AppendString(nil, d.Content)
	if want, _ := json.Marshal(d.Content); !bytes.Equal(s, want) {
		t.Fatalf("AppendString(%q) = %q, want %q", d.Content, s, want)
	}
}

// TestAppendDeltaIsMarshal: every field combination and every escape comes
// out as Marshal writes it; a delta with tool calls is refused untouched.
func TestAppendDeltaIsMarshal(t *testing.T) {
	for _, text := range appendCases {
		for _, d := range []oaiwire.Delta{
			{Content: text},
			{Reasoning: text},
			{Role: "assistant", Content: text},
			{Role: text, Content: "x", Reasoning: text},
			{Content: text, Reasoning: "r"},
		} {
			checkDelta(t, d)
		}
	}
	checkDelta(t, oaiwire.Delta{})
	i := 0
	d := oaiwire.Delta{Content: "x", ToolCalls: []oaiwire.ToolCall{{Index: &i, ID: "c", Type: "function"}}}
	if got, ok := oaiwire.AppendDelta([]byte("p"), d); ok || string(got) != "p" {
		t.Fatalf("AppendDelta with tool calls = %q, %v; want the input and false", got, ok)
	}
}

// TestAppendDeltaKnowsEveryField: AppendDelta writes Delta's fields by
// hand, so a field added to Delta must be added there too (and here).
func TestAppendDeltaKnowsEveryField(t *testing.T) {
	var fields []string
	for f := range reflect.TypeFor[oaiwire.Delta]().Fields() {
		fields = append(fields, f.Name+" "+f.Tag.Get("json"))
	}
	want := []string{"Role role,omitempty", "Content content,omitempty",
		"Reasoning reasoning_content,omitempty", "ToolCalls tool_calls,omitempty"}
	if !slices.Equal(fields, want) {
		t.Fatalf("Delta's fields are %q; AppendDelta writes %q: teach it the change", fields, want)
	}
}

// TestAppendStringEveryRune: every rune, alone and between an invalid
// byte and a letter, and every string of one or two bytes, comes out as
// Marshal writes it.
func TestAppendStringEveryRune(t *testing.T) {
	check := func(s string) {
		want, _ := json.Marshal(s)
		if got := oaiwire.AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %q, want %q", s, got, want)
		}
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		check(string(r))
		check("\xff" + string(r) + "a")
	}
	for b := range 1 << 16 {
		check(string([]byte{byte(b >> 8), byte(b)}))
		check(string([]byte{byte(b)}))
	}
}

// FuzzAppendDelta: for any texts, AppendDelta writes what Marshal writes.
// Seeds are appendCases and testdata/fuzz/FuzzAppendDelta.
func FuzzAppendDelta(f *testing.F) {
	for _, c := range appendCases {
		f.Add("", c, "")
		f.Add("assistant", "", c)
	}
	f.Fuzz(func(t *testing.T, role, content, reasoning string) {
		checkDelta(t, oaiwire.Delta{Role: role, Content: content, Reasoning: reasoning})
	})
}
