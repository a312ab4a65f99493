package relaymsg

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// imageBytes is n deterministic bytes.
func imageBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestSplitAndAssembleImage(t *testing.T) {
	for _, size := range []int{1, ImagePartBytes - 1, ImagePartBytes, ImagePartBytes + 1, 3*ImagePartBytes + 17, MaxImageBytes} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			img := imageBytes(size)
			parts, err := SplitImage(img)
			if err != nil {
				t.Fatal(err)
			}
			if want := (size + ImagePartBytes - 1) / ImagePartBytes; len(parts) != want {
				t.Fatalf("%d parts, want %d", len(parts), want)
			}
			// Reversed: API Gateway may deliver in any order.
			var a ImageAssembler
			for i := len(parts) - 1; i >= 0; i-- {
				if a.Complete() {
					t.Fatal("complete before the last part")
				}
				if err := a.Add(int64(i), &ImagePart{Parts: int64(len(parts)), Data: parts[i]}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := a.Image()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, img) {
				t.Fatal("reassembled image differs")
			}
		})
	}
	for _, size := range []int{0, MaxImageBytes + 1} {
		if _, err := SplitImage(imageBytes(size)); err == nil {
			t.Errorf("SplitImage of %d bytes: no error", size)
		}
	}
}

func TestImageAssemblerRefuses(t *testing.T) {
	full := imageBytes(ImagePartBytes)
	tests := []struct {
		name string
		// before are parts added first (all valid).
		before []*ImagePart
		seq    int64
		part   *ImagePart
		want   string
	}{
		{"no part", nil, 0, nil, "without an image part"},
		{"zero parts", nil, 0, &ImagePart{Parts: 0, Data: []byte{1}}, "outside"},
		{"too many parts", nil, 0, &ImagePart{Parts: MaxImageParts + 1, Data: full}, "outside"},
		{"index past the end", nil, 2, &ImagePart{Parts: 2, Data: []byte{1}}, "part 2 of 2"},
		{"negative index", nil, -1, &ImagePart{Parts: 2, Data: full}, "part -1 of 2"},
		{"short middle part", nil, 0, &ImagePart{Parts: 2, Data: []byte{1, 2}}, "holds 2 bytes"},
		{"oversized last part", nil, 0, &ImagePart{Parts: 1, Data: append(full, 1)}, "last part holds"},
		{"duplicate", []*ImagePart{{Parts: 2, Data: full}}, 0, &ImagePart{Parts: 2, Data: full}, "twice"},
		{"parts disagree", []*ImagePart{{Parts: 2, Data: full}}, 1, &ImagePart{Parts: 3, Data: full}, "says 3 parts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a ImageAssembler
			for i, p := range tc.before {
				if err := a.Add(int64(i), p); err != nil {
					t.Fatal(err)
				}
			}
			err := a.Add(tc.seq, tc.part)
			if !errors.Is(err, ErrImageProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v, want ErrImageProtocol saying %q", err, tc.want)
			}
		})
	}
	var a ImageAssembler
	if _, err := a.Image(); !errors.Is(err, ErrImageProtocol) {
		t.Fatalf("Image of nothing = %v", err)
	}
}

// TestImagePartFitsMessage: a full part in a chunk with the longest ids
// the validator allows, stamped with From by the relay, is under the cap.
func TestImagePartFitsMessage(t *testing.T) {
	c := &Chunk{Job: strings.Repeat("j", 64), To: strings.Repeat("t", 128), From: strings.Repeat("f", 128),
		Seq: MaxImageParts - 2, Image: &ImagePart{Parts: MaxImageParts, Data: imageBytes(ImagePartBytes)}, Ticket: tkt}
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxMessage-4096 {
		t.Fatalf("a full image chunk is %d bytes: too close to the %d cap", len(b), MaxMessage)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.(*Chunk).Image.Data, c.Image.Data) {
		t.Fatal("part data changed on the way")
	}
}

func TestChunkWantsDeltasOrImage(t *testing.T) {
	for _, in := range []string{
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[],"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[{"content":"a"}],"image":{"parts":1,"data":"AA=="},"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"image":{"parts":1,"data":""},"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"image":{"parts":257,"data":"AA=="},"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"image":{"parts":1,"data":"!!"},"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"image_job","job":"j","reply_to":"c","model":"m","request":{"prompt":"","width":512,"height":512},"budget_ms":1,"ticket":"` + tkt + `"}`,
		`{"v":1,"type":"image_job","job":"j","reply_to":"c","model":"m","request":{"prompt":"p","width":8192,"height":512},"budget_ms":1,"ticket":"` + tkt + `"}`,
	} {
		if m, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%s) = %#v, want an error", in, m)
		}
	}
}

func TestImageRequestHashStable(t *testing.T) {
	j := &ImageJob{Job: "j", ReplyTo: "c", Model: "m", Request: ImageRequest{Prompt: "<a> & \u2028 b", Width: 512, Height: 768}, Ticket: tkt}
	b, err := Encode(j)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := ImageRequestHash(&j.Request)
	h2, _ := ImageRequestHash(&m.(*ImageJob).Request)
	if h1 != h2 || len(h1) != 64 {
		t.Fatalf("hash %s on the gateway, %s on the worker", h1, h2)
	}
}

// imageSeeds are FuzzImageParts' seeds: newline-separated chunk messages.
func imageSeeds() [][]byte {
	chunk := func(seq, parts int64, data string) string {
		return fmt.Sprintf(`{"v":1,"type":"chunk","job":"j","to":"c","seq":%d,"image":{"parts":%d,"data":%q},"ticket":"%s"}`, seq, parts, data, tkt)
	}
	return [][]byte{
		[]byte(chunk(0, 1, "iVBORw0KGgo=")),
		[]byte(chunk(1, 2, "AAEC") + "\n" + chunk(0, 2, "AAEC")),
		[]byte(chunk(0, 1, "AA==") + "\n" + chunk(0, 1, "AA==")),
		[]byte(chunk(0, 3, "AA==") + "\n" + chunk(2, 2, "AA==")),
		[]byte(chunk(-1, 1, "AA==")),
		[]byte(`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"image":{"parts":1,"data":null},"ticket":"` + tkt + `"}`),
	}
}

// FuzzImageParts feeds decoded chunks to an assembler: whatever arrives,
// nothing panics, what is held stays within MaxImageBytes, and a complete
// image splits back into the parts that made it.
func FuzzImageParts(f *testing.F) {
	f.Fuzz(checkImageParts)
}

func checkImageParts(t *testing.T, in []byte) {
	var a ImageAssembler
	held := 0
	for line := range bytes.SplitSeq(in, []byte("\n")) {
		m, err := Decode(line)
		if err != nil {
			continue
		}
		c, ok := m.(*Chunk)
		if !ok || c.Image == nil {
			continue
		}
		if err := a.Add(c.Seq, c.Image); err != nil {
			if !errors.Is(err, ErrImageProtocol) {
				t.Fatalf("Add error %v is not ErrImageProtocol", err)
			}
			continue
		}
		held += len(c.Image.Data)
		if held > MaxImageBytes {
			t.Fatalf("assembler holds %d bytes", held)
		}
	}
	if !a.Complete() {
		return
	}
	img, err := a.Image()
	if err != nil {
		t.Fatal(err)
	}
	parts, err := SplitImage(img)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(parts)) != a.Parts() {
		t.Fatalf("image of %d parts splits into %d", a.Parts(), len(parts))
	}
}

func TestImageSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzImageParts")
	seeds := imageSeeds()
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, s := range seeds {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)))
		if err != nil || string(got) != want {
			t.Fatalf("seed-%02d is missing or stale (run go test -run TestImageSeedCorpus -update): %v", i, err)
		}
		checkImageParts(t, s)
	}
}
