package stagenet_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

var update = flag.Bool("update", false, "rewrite golden files and the fuzz seed corpus")

// sampleFrames is one frame of each kind, as the runtime would send them.
func sampleFrames(t testing.TB) []stagenet.Frame {
	hidden, err := engine.EncodeHidden(&engine.Hidden{Pos: 17, Tokens: 2, Dim: 3, Data: []float32{1, -2.5, 0.25, 8, -0.5, 3}}, engine.F32)
	if err != nil {
		t.Fatal(err)
	}
	nonce := binary.LittleEndian.AppendUint64(nil, 1)
	bench, err := engine.EncodeHidden(&engine.Hidden{Tokens: 1, Dim: 3, Data: []float32{0.5, -1, 2}}, engine.F32)
	if err != nil {
		t.Fatal(err)
	}
	return []stagenet.Frame{
		{Kind: stagenet.KindOpen, Job: "job-7f3a", Step: 0, Pos: 0, Payload: []byte(`{"model":"llama-70b","stage":1}`)},
		{Kind: stagenet.KindHidden, Job: "job-7f3a", Step: 3, Pos: 17, Payload: hidden},
		{Kind: stagenet.KindTokens, Job: "job-7f3a", Step: 3, Pos: 19, Payload: stagenet.AppendTokens(nil, []uint32{1, 2, 300, math.MaxUint32})},
		{Kind: stagenet.KindTruncate, Job: "job-7f3a", Step: 4, Pos: 18},
		{Kind: stagenet.KindClose, Job: "job-7f3a", Step: 5, Pos: 20, Payload: []byte(`{"receipts":[]}`)},
		{Kind: stagenet.KindError, Job: "job 7f3a ~", Step: 5, Pos: 0, Payload: []byte("stage 2: out of memory — KV cache full")},
		{Kind: stagenet.KindPing, Step: 0, Pos: 0, Payload: nonce},
		{Kind: stagenet.KindPong, Step: 0, Pos: 0, Payload: nonce},
		{Kind: stagenet.KindBench, Job: benchModel, Payload: bench},
		{Kind: stagenet.KindBenchReply, Job: benchModel, Payload: bench},
		{Kind: stagenet.KindVerify, Job: "job-7f3a", Step: 6, Pos: 20, Payload: append(stagenet.AppendTokens(nil, []uint32{2, 7, 9}), hidden...)},
	}
}

// benchModel is a manifest hash in the form bench frames name it.
const benchModel = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func encode(t testing.TB, f stagenet.Frame) []byte {
	b, err := stagenet.AppendFrame(nil, &f)
	if err != nil {
		t.Fatalf("encode %s: %v", f.Kind, err)
	}
	return b
}

// TestFrameRoundTrip: every kind decodes, from bytes and from a stream,
// to what was encoded, with its payload's SHA-256.
func TestFrameRoundTrip(t *testing.T) {
	for _, f := range sampleFrames(t) {
		t.Run(f.Kind.String(), func(t *testing.T) {
			prefix := []byte("kept")
			b, err := stagenet.AppendFrame(bytes.Clone(prefix), &f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatal("AppendFrame did not append")
			}
			b = b[len(prefix):]
			if f.Hash != sha256.Sum256(f.Payload) {
				t.Error("AppendFrame did not set Hash to the payload's SHA-256")
			}
			want := len(f.Job) + len(f.Payload) + stagenet.HeaderSize
			if len(b) != want {
				t.Errorf("encoded %d bytes, want %d", len(b), want)
			}
			// Trailing bytes belong to the next frame.
			got, n, err := stagenet.DecodeFrame(append(bytes.Clone(b), 0xAA, 0xBB), len(f.Payload))
			if err != nil {
				t.Fatal(err)
			}
			if n != len(b) {
				t.Errorf("DecodeFrame used %d bytes, want %d", n, len(b))
			}
			if !framesEqual(got, f) {
				t.Errorf("DecodeFrame = %+v, want %+v", got, f)
			}
			r := bufio.NewReader(bytes.NewReader(append(bytes.Clone(b), b...)))
			for i := range 2 {
				got, err = stagenet.ReadFrame(r, len(f.Payload))
				if err != nil {
					t.Fatalf("ReadFrame %d: %v", i, err)
				}
				if !framesEqual(got, f) {
					t.Errorf("ReadFrame %d = %+v, want %+v", i, got, f)
				}
			}
			if _, err := stagenet.ReadFrame(r, len(f.Payload)); err != io.EOF {
				t.Errorf("ReadFrame at the end: %v, want io.EOF", err)
			}
		})
	}
}

func framesEqual(a, b stagenet.Frame) bool {
	return a.Kind == b.Kind && a.Job == b.Job && a.Step == b.Step && a.Pos == b.Pos &&
		bytes.Equal(a.Payload, b.Payload) && a.Hash == b.Hash
}

// TestFrameGolden pins the wire encoding of every kind.
func TestFrameGolden(t *testing.T) {
	var b strings.Builder
	for _, f := range sampleFrames(t) {
		fmt.Fprintf(&b, "%s %s\n", f.Kind, hex.EncodeToString(encode(t, f)))
	}
	path := filepath.Join("testdata", "frame.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("frame encoding changed (run with -update if on purpose):\n%s\nwant:\n%s", b.String(), want)
	}
}

// mutate returns a copy of b with byte i set to v.
func mutate(b []byte, i int, v byte) []byte {
	c := bytes.Clone(b)
	c[i] = v
	return c
}

// raw builds frame bytes by hand, bypassing AppendFrame's checks: kind,
// job and payload as given, the hash of the payload (unless hash is set).
func raw(kind byte, job string, payload []byte, hash []byte) []byte {
	b := []byte("C0SF")
	b = append(b, 1, kind, byte(len(job)), 0)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint32(b, 17)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	if hash == nil {
		sum := sha256.Sum256(payload)
		hash = sum[:]
	}
	b = append(b, hash...)
	b = append(b, job...)
	return append(b, payload...)
}

// refusals are byte strings the decoder must refuse, with the text its
// error must contain.
func refusals(t testing.TB) []struct {
	name string
	b    []byte
	max  int
	want string
} {
	fs := sampleFrames(t)
	hidden := encode(t, fs[1])
	oversized := raw(byte(stagenet.KindHidden), "j", nil, nil)
	binary.LittleEndian.PutUint32(oversized[16:], math.MaxUint32)
	return []struct {
		name string
		b    []byte
		max  int
		want string
	}{
		{"magic", mutate(hidden, 0, 'X'), 1 << 20, `bad magic, want "C0SF"`},
		{"magic prefix", []byte("C1"), 1 << 20, `bad magic, want "C0SF"`},
		{"version", mutate(hidden, 4, 2), 1 << 20, "version 2, this member speaks 1"},
		{"kind zero", mutate(hidden, 5, 0), 1 << 20, "unknown kind 0"},
		{"kind twelve", mutate(hidden, 5, 12), 1 << 20, "unknown kind 12"},
		{"verify no count", raw(byte(stagenet.KindVerify), "j", []byte{1, 0}, nil), 1 << 20, "verify payload of 2 bytes has no draft count"},
		{"verify too many drafts", raw(byte(stagenet.KindVerify), "j", stagenet.AppendTokens(nil, []uint32{65}), nil), 1 << 20, "names 65 drafts (at most 64"},
		{"verify drafts past the payload", raw(byte(stagenet.KindVerify), "j", stagenet.AppendTokens(nil, []uint32{3, 1, 2}), nil), 1 << 20, "verify payload of 12 bytes names 3 drafts"},
		{"bench short job", raw(byte(stagenet.KindBench), "job-1", []byte{1}, nil), 1 << 20, "bench frame's job id is 5 bytes, want the model's manifest hash"},
		{"bench upper hex", raw(byte(stagenet.KindBench), strings.ToUpper(benchModel), []byte{1}, nil), 1 << 20, "bench frame's job id byte 20 is 'A'"},
		{"bench reply empty", raw(byte(stagenet.KindBenchReply), benchModel, nil, nil), 1 << 20, "bench_reply payload of 0 bytes"},
		{"reserved", mutate(hidden, 7, 1), 1 << 20, "reserved byte is 1, want 0"},
		{"job too long", raw(byte(stagenet.KindOpen), strings.Repeat("j", 65), nil, nil), 1 << 20, "job id of 65 bytes, over the 64-byte limit"},
		{"job empty", raw(byte(stagenet.KindHidden), "", nil, nil), 1 << 20, "hidden frame without a job id"},
		{"job control byte", raw(byte(stagenet.KindOpen), "job\n1", nil, nil), 1 << 20, "job id byte 3 is 0x0a, not printable ASCII"},
		{"job high byte", raw(byte(stagenet.KindOpen), "jöb", nil, nil), 1 << 20, "job id byte 1 is 0xc3, not printable ASCII"},
		{"ping with job", raw(byte(stagenet.KindPing), "j", make([]byte, 8), nil), 1 << 20, "ping frame with a job id (1 bytes)"},
		{"ping short nonce", raw(byte(stagenet.KindPing), "", make([]byte, 4), nil), 1 << 20, "ping payload of 4 bytes, want an 8-byte nonce"},
		{"over max", hidden, len(fs[1].Payload) - 1, fmt.Sprintf("hidden payload of %d bytes, over the %d-byte limit", len(fs[1].Payload), len(fs[1].Payload)-1)},
		{"header over max", oversized, 1 << 20, "hidden payload of 4294967295 bytes, over the 1048576-byte limit"},
		{"negative max", hidden, -1, "over the 0-byte limit"},
		{"hash", mutate(hidden, 20, hidden[20]^1), 1 << 20, "hidden payload does not match its SHA-256"},
		{"payload flipped", mutate(hidden, len(hidden)-1, hidden[len(hidden)-1]^1), 1 << 20, "does not match its SHA-256"},
		{"truncate payload", raw(byte(stagenet.KindTruncate), "j", []byte{1}, nil), 1 << 20, "truncate frame with a 1-byte payload"},
		{"tokens partial", raw(byte(stagenet.KindTokens), "j", []byte{1, 2, 3, 4, 5}, nil), 1 << 20, "tokens payload of 5 bytes is not whole u32 token ids"},
		{"error too long", raw(byte(stagenet.KindError), "j", bytes.Repeat([]byte("e"), 1025), nil), 1 << 20, "error reason of 1025 bytes, over the 1024-byte limit"},
		{"error not utf8", raw(byte(stagenet.KindError), "j", []byte{'o', 0xff, 'k'}, nil), 1 << 20, "error reason is not UTF-8"},
	}
}

// TestFrameRefusals: each malformed frame is refused by DecodeFrame and
// ReadFrame alike, with an error wrapping ErrFrame that says what is wrong.
func TestFrameRefusals(t *testing.T) {
	for _, tc := range refusals(t) {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := stagenet.DecodeFrame(tc.b, tc.max)
			if !errors.Is(err, stagenet.ErrFrame) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeFrame: %v, want ErrFrame saying %q", err, tc.want)
			}
			if len(tc.b) < stagenet.HeaderSize {
				return
			}
			_, err = stagenet.ReadFrame(bufio.NewReader(bytes.NewReader(tc.b)), tc.max)
			if !errors.Is(err, stagenet.ErrFrame) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadFrame: %v, want ErrFrame saying %q", err, tc.want)
			}
		})
	}
}

// TestAppendFrameRefuses: the encoder refuses what the decoder would.
func TestAppendFrameRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    stagenet.Frame
		want string
	}{
		{"kind", stagenet.Frame{Kind: 0, Job: "j"}, "unknown kind 0"},
		{"no job", stagenet.Frame{Kind: stagenet.KindHidden}, "hidden frame without a job id"},
		{"long job", stagenet.Frame{Kind: stagenet.KindOpen, Job: strings.Repeat("x", 65)}, "job id of 65 bytes"},
		{"job tab", stagenet.Frame{Kind: stagenet.KindOpen, Job: "a\tb"}, "job id byte 1 is 0x09"},
		{"pong job", stagenet.Frame{Kind: stagenet.KindPong, Job: "j", Payload: make([]byte, 8)}, "pong frame with a job id"},
		{"ping nonce", stagenet.Frame{Kind: stagenet.KindPing}, "ping payload of 0 bytes"},
		{"truncate payload", stagenet.Frame{Kind: stagenet.KindTruncate, Job: "j", Payload: []byte{0}}, "truncate frame with a 1-byte payload"},
		{"tokens", stagenet.Frame{Kind: stagenet.KindTokens, Job: "j", Payload: []byte{0, 0}}, "tokens payload of 2 bytes"},
		{"error long", stagenet.Frame{Kind: stagenet.KindError, Job: "j", Payload: make([]byte, 1025)}, "error reason of 1025 bytes"},
		{"error utf8", stagenet.Frame{Kind: stagenet.KindError, Job: "j", Payload: []byte{0xc3}}, "not UTF-8"},
		{"bench job length", stagenet.Frame{Kind: stagenet.KindBench, Job: "abc", Payload: []byte{1}}, "bench frame's job id is 3 bytes"},
		{"bench job hex", stagenet.Frame{Kind: stagenet.KindBenchReply, Job: strings.Repeat("A", 64), Payload: []byte{1}}, "bench_reply frame's job id byte 0 is 'A'"},
		{"bench empty", stagenet.Frame{Kind: stagenet.KindBench, Job: benchModel}, "bench payload of 0 bytes"},
		{"bench large", stagenet.Frame{Kind: stagenet.KindBench, Job: benchModel, Payload: make([]byte, stagenet.MaxBenchPayload+1)}, "bench payload of 1048641 bytes"},
		{"bench no job", stagenet.Frame{Kind: stagenet.KindBench, Payload: []byte{1}}, "bench frame without a job id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := stagenet.AppendFrame([]byte("x"), &tc.f)
			if !errors.Is(err, stagenet.ErrFrame) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("AppendFrame: %v, want ErrFrame saying %q", err, tc.want)
			}
			if string(out) != "x" {
				t.Errorf("AppendFrame wrote %q on error", out)
			}
		})
	}
}

// TestDecodeShort: every proper prefix of a frame is ErrShort, not a
// refusal; the whole frame then decodes.
func TestDecodeShort(t *testing.T) {
	for _, f := range sampleFrames(t) {
		b := encode(t, f)
		for i := range len(b) {
			if _, _, err := stagenet.DecodeFrame(b[:i], 1<<20); err != stagenet.ErrShort {
				t.Fatalf("%s prefix of %d bytes: %v, want ErrShort", f.Kind, i, err)
			}
		}
		if _, _, err := stagenet.DecodeFrame(b, 1<<20); err != nil {
			t.Fatalf("%s: %v", f.Kind, err)
		}
	}
}

// TestReadFrameEnds: a stream that ends between frames is io.EOF, one that
// ends inside a frame is io.ErrUnexpectedEOF (a closed connection, not a
// malformed frame).
func TestReadFrameEnds(t *testing.T) {
	b := encode(t, sampleFrames(t)[1])
	for _, n := range []int{1, stagenet.HeaderSize - 1, stagenet.HeaderSize, stagenet.HeaderSize + 3, len(b) - 1} {
		_, err := stagenet.ReadFrame(bufio.NewReader(bytes.NewReader(b[:n])), 1<<20)
		if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, stagenet.ErrFrame) {
			t.Errorf("%d of %d bytes: %v, want io.ErrUnexpectedEOF", n, len(b), err)
		}
	}
	if _, err := stagenet.ReadFrame(bufio.NewReader(bytes.NewReader(nil)), 1<<20); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
}

// TestReadFrameAllocatesWithinCap: a header that claims a 4 GiB payload
// over a 1 MiB cap is refused with no allocation near either size.
func TestReadFrameAllocatesWithinCap(t *testing.T) {
	b := raw(byte(stagenet.KindHidden), "j", nil, nil)
	binary.LittleEndian.PutUint32(b[16:], math.MaxUint32)
	const runs, limit = 100, 1 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := stagenet.ReadFrame(bufio.NewReaderSize(bytes.NewReader(b), 128), limit); !errors.Is(err, stagenet.ErrFrame) {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per >= limit {
		t.Errorf("refusing an oversized frame allocated %d bytes a time, cap %d", per, limit)
	}
}

func TestTokens(t *testing.T) {
	ids := []uint32{0, 1, 128000, math.MaxUint32}
	p := stagenet.AppendTokens(nil, ids)
	if hex.EncodeToString(p) != "000000000100000000f40100ffffffff" {
		t.Errorf("AppendTokens = %x", p)
	}
	got, err := stagenet.DecodeTokens(p)
	if err != nil || !reflect.DeepEqual(got, ids) {
		t.Errorf("DecodeTokens = %v, %v", got, err)
	}
	if _, err := stagenet.DecodeTokens(p[:3]); !errors.Is(err, stagenet.ErrFrame) {
		t.Errorf("DecodeTokens of 3 bytes: %v", err)
	}
}

func TestKindString(t *testing.T) {
	if s := stagenet.KindTruncate.String(); s != "truncate" {
		t.Errorf("KindTruncate = %q", s)
	}
	if s := stagenet.Kind(42).String(); s != "kind(42)" {
		t.Errorf("Kind(42) = %q", s)
	}
}

// fuzzSeed is one seed of FuzzDecodeFrame: bytes and the reader's limit.
type fuzzSeed struct {
	b   []byte
	max uint32
}

func fuzzSeeds(t testing.TB) map[string]fuzzSeed {
	seeds := map[string]fuzzSeed{}
	var stream []byte
	for _, f := range sampleFrames(t) {
		b := encode(t, f)
		stream = append(stream, b...)
		seeds["valid-"+f.Kind.String()] = fuzzSeed{b, 1 << 20}
		seeds["truncated-"+f.Kind.String()] = fuzzSeed{b[:len(b)-1], 1 << 20}
		seeds["header-only-"+f.Kind.String()] = fuzzSeed{b[:stagenet.HeaderSize], 1 << 20}
	}
	seeds["stream"] = fuzzSeed{stream, 1 << 20}
	hidden := encode(t, sampleFrames(t)[1])
	seeds["oversized"] = fuzzSeed{hidden, 10}
	for _, r := range refusals(t) {
		if r.max >= 0 {
			seeds["refused-"+strings.ReplaceAll(r.name, " ", "-")] = fuzzSeed{r.b, uint32(r.max)}
		}
	}
	seeds["empty"] = fuzzSeed{nil, 0}
	return seeds
}

// FuzzDecodeFrame: no input panics; every error is ErrShort or wraps
// ErrFrame; a decoded frame respects the limit, carries its payload's
// hash, re-encodes to exactly the bytes it came from, and ReadFrame reads
// the same frame from a stream of those bytes.
func FuzzDecodeFrame(f *testing.F) {
	names := make([]string, 0)
	seeds := fuzzSeeds(f)
	for name := range seeds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f.Add(seeds[name].b, seeds[name].max)
	}
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		limit := int(max % (1 << 24))
		fr, n, err := stagenet.DecodeFrame(b, limit)
		rfr, rerr := stagenet.ReadFrame(bufio.NewReaderSize(bytes.NewReader(b), 16), limit)
		if err != nil {
			if err != stagenet.ErrShort && !errors.Is(err, stagenet.ErrFrame) {
				t.Fatalf("error %v is neither ErrShort nor ErrFrame", err)
			}
			if rerr == nil {
				t.Fatalf("ReadFrame read %+v where DecodeFrame said %v", rfr, err)
			}
			return
		}
		if n < stagenet.HeaderSize || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		if len(fr.Payload) > limit {
			t.Fatalf("payload of %d bytes over the limit %d", len(fr.Payload), limit)
		}
		if fr.Hash != sha256.Sum256(fr.Payload) {
			t.Fatal("hash does not match the payload")
		}
		again, err := stagenet.AppendFrame(nil, &fr)
		if err != nil || !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
		if rerr != nil || !framesEqual(rfr, fr) {
			t.Fatalf("ReadFrame = %+v, %v; DecodeFrame = %+v", rfr, rerr, fr)
		}
	})
}

// TestWriteFrameCorpus writes FuzzDecodeFrame's seed corpus (-update).
func TestWriteFrameCorpus(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint32(%d)\n", s.b, s.max)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
