package testmodel

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestTokenizerMetadataMatchesFile: every tokenizer key/value that
// TokenizerMetadata reports is encoded, byte for byte, in the model file,
// for both vocabularies.
func TestTokenizerMetadataMatchesFile(t *testing.T) {
	for _, o := range []Options{{}, {ChatTemplate: "{{ messages }}"}, {BPE: &BPE{}}, {BPE: &BPE{Pre: "qwen2", ChatTemplate: "-"}}} {
		file, err := Bytes(o)
		if err != nil {
			t.Fatal(err)
		}
		md, err := TokenizerMetadata(o)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k, v := range md {
			var enc bytes.Buffer
			if err := encodeKV(&enc, kv{k, v}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(file, enc.Bytes()) {
				t.Errorf("%s not in the file as reported", k)
			}
			n++
		}
		if got := bytes.Count(file, []byte("tokenizer.")); got != n {
			t.Errorf("file has %d tokenizer keys, metadata %d", got, n)
		}
	}
}

// encodeKV encodes one key/value as the file does, by encoding a file
// with it alone and cutting the header off.
func encodeKV(w *bytes.Buffer, e kv) error {
	var b bytes.Buffer
	if err := encode(&b, []kv{e}, nil); err != nil {
		return err
	}
	w.Write(b.Bytes()[4+4+8+8:])
	return nil
}

func TestBPEVocabulary(t *testing.T) {
	v := BPE{}.build(nil)
	if len(v.merges) == 0 || len(v.merges) > 1000 {
		t.Fatalf("%d merges", len(v.merges))
	}
	// Every word of the list is one token, and only those keep output rows.
	for _, w := range DefaultWords {
		if !slices.Contains(v.tokens, "Ġ"+w) {
			t.Errorf("no token for %q", w)
		}
	}
	if len(v.keep) != len(DefaultWords) {
		t.Errorf("%d kept rows, want %d", len(v.keep), len(DefaultWords))
	}
	for id := range v.keep {
		if v.types[id] != tokNormal || !strings.HasPrefix(v.tokens[id], "Ġ") {
			t.Errorf("kept token %q type %d", v.tokens[id], v.types[id])
		}
	}
	// Each merge's result is a token, and the layout is deterministic.
	for _, m := range v.merges {
		l, r, _ := strings.Cut(m, " ")
		if !slices.Contains(v.tokens, l+r) {
			t.Errorf("merge %q makes no token", m)
		}
	}
	if w := (BPE{}).build(nil); !slices.Equal(w.tokens, v.tokens) || !slices.Equal(w.merges, v.merges) {
		t.Error("two builds differ")
	}
}
