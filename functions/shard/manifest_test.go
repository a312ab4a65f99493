package shard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testModel makes blobs of a small model and its signed manifest.
func testModel(t testing.TB, layers int) (Manifest, map[Hash][]byte) {
	t.Helper()
	data := map[Hash][]byte{}
	blob := func(name string, size int) Blob {
		b := bytes.Repeat([]byte(name), size/len(name)+1)[:size]
		h := sha256.Sum256(b)
		data[h] = b
		return Blob{Hash: h, Size: int64(size)}
	}
	m := Manifest{Name: "tiny", Embed: blob("embed", 3000), Head: blob("head", 2000)}
	for i := range layers {
		m.Layers = append(m.Layers, blob(fmt.Sprintf("layer-%d:", i), 10_000+i))
	}
	m.Sign(testKey(1))
	return m, data
}

// blobServer serves blobs by hash with Range support (http.ServeContent),
// optionally cutting a response short or corrupting a byte.
type blobServer struct {
	data    map[Hash][]byte
	cutAt   atomic.Int64 // stop a response after this many bytes (0: never)
	corrupt atomic.Bool
	ranged  atomic.Int64 // requests that carried a Range header
}

func (s *blobServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var h Hash
	if err := h.UnmarshalText([]byte(strings.TrimPrefix(r.URL.Path, "/blobs/"))); err != nil {
		http.NotFound(w, r)
		return
	}
	b, ok := s.data[h]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Range") != "" {
		s.ranged.Add(1)
	}
	if s.corrupt.Load() {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 1
	}
	if cut := s.cutAt.Swap(0); cut > 0 {
		// Send a partial body and drop the connection.
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:cut])
		panic(http.ErrAbortHandler)
	}
	http.ServeContent(w, r, "", zeroTime, bytes.NewReader(b))
}

var zeroTime = time.Time{}

func TestManifestMatchesDescriptor(t *testing.T) {
	m, _ := testModel(t, 4)
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	d := Model{Name: "tiny", Hash: m.Hash(), Layers: 4, LayerBytes: 20_000, EmbedBytes: 3000, HeadBytes: 2000, ActivationBytes: 8}
	d.Sign(testKey(1))
	if err := m.Matches(&d); err != nil {
		t.Fatal(err)
	}
	small := d
	small.LayerBytes = 10_001
	if err := m.Matches(&small); !errors.Is(err, ErrInvalid) {
		t.Fatalf("undersized descriptor: %v", err)
	}
	other := d
	other.Hash[0] ^= 1
	if err := m.Matches(&other); !errors.Is(err, ErrInvalid) {
		t.Fatalf("other hash: %v", err)
	}
	bad := m
	bad.Layers = append([]Blob(nil), m.Layers...)
	bad.Layers[2].Size++
	if err := bad.Check(); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered manifest: %v", err)
	}
	blobs, err := m.Blobs(0, 2)
	if err != nil || len(blobs) != 3 || blobs[0] != m.Embed {
		t.Fatalf("Blobs(0,2) = %v, %v", blobs, err)
	}
	blobs, err = m.Blobs(2, 4)
	if err != nil || len(blobs) != 3 || blobs[2] != m.Head {
		t.Fatalf("Blobs(2,4) = %v, %v", blobs, err)
	}
	if _, err := m.Blobs(3, 3); err == nil {
		t.Fatal("empty range accepted")
	}
}

func TestPull(t *testing.T) {
	m, data := testModel(t, 6)
	srv := &blobServer{data: data}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	src := HTTPSource{Base: ts.URL + "/blobs/", Client: ts.Client()}
	ctx := context.Background()
	blobs, _ := m.Blobs(2, 6)

	t.Run("fresh", func(t *testing.T) {
		dir := t.TempDir()
		if err := Pull(ctx, src, dir, blobs); err != nil {
			t.Fatal(err)
		}
		for _, b := range blobs {
			got, err := os.ReadFile(filepath.Join(dir, b.Hash.String()))
			if err != nil || !bytes.Equal(got, data[b.Hash]) {
				t.Fatalf("blob %s not stored: %v", b.Hash, err)
			}
		}
	})
	t.Run("resumes after a dropped connection", func(t *testing.T) {
		dir := t.TempDir()
		srv.cutAt.Store(4000)
		before := srv.ranged.Load()
		err := Pull(ctx, src, dir, blobs[:1])
		if err == nil || errors.Is(err, ErrBlobMismatch) {
			t.Fatalf("cut download: got %v, want a resumable error", err)
		}
		part := filepath.Join(dir, blobs[0].Hash.String()+".part")
		if st, err := os.Stat(part); err != nil || st.Size() == 0 {
			t.Fatalf("no partial file kept: %v", err)
		}
		if err := Pull(ctx, src, dir, blobs[:1]); err != nil {
			t.Fatal(err)
		}
		if srv.ranged.Load() == before {
			t.Fatal("the second pull did not resume with a Range request")
		}
		got, _ := os.ReadFile(filepath.Join(dir, blobs[0].Hash.String()))
		if !bytes.Equal(got, data[blobs[0].Hash]) {
			t.Fatal("resumed blob differs")
		}
	})
	t.Run("corrupt partial on disk is caught", func(t *testing.T) {
		dir := t.TempDir()
		b := blobs[1]
		bad := append([]byte(nil), data[b.Hash][:5000]...)
		bad[10] ^= 1
		os.WriteFile(filepath.Join(dir, b.Hash.String()+".part"), bad, 0o644)
		if err := Pull(ctx, src, dir, []Blob{b}); !errors.Is(err, ErrBlobMismatch) {
			t.Fatalf("got %v, want ErrBlobMismatch", err)
		}
		if _, err := os.Stat(filepath.Join(dir, b.Hash.String()+".part")); !os.IsNotExist(err) {
			t.Fatal("bad partial file kept")
		}
		if err := Pull(ctx, src, dir, []Blob{b}); err != nil {
			t.Fatalf("clean retry: %v", err)
		}
	})
	t.Run("server sends wrong bytes", func(t *testing.T) {
		dir := t.TempDir()
		srv.corrupt.Store(true)
		defer srv.corrupt.Store(false)
		if err := Pull(ctx, src, dir, blobs[:1]); !errors.Is(err, ErrBlobMismatch) {
			t.Fatalf("got %v, want ErrBlobMismatch", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("rejected bytes left on disk: %v", entries)
		}
	})
	t.Run("tampered complete file is replaced", func(t *testing.T) {
		dir := t.TempDir()
		b := blobs[2]
		os.WriteFile(filepath.Join(dir, b.Hash.String()), []byte("not the blob"), 0o644)
		if err := Pull(ctx, src, dir, []Blob{b}); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, b.Hash.String()))
		if !bytes.Equal(got, data[b.Hash]) {
			t.Fatal("tampered file kept")
		}
	})
	t.Run("blob longer than the manifest says", func(t *testing.T) {
		short := blobs[0]
		short.Size--
		if err := Pull(ctx, src, t.TempDir(), []Blob{short}); !errors.Is(err, ErrBlobMismatch) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestBlobVerifier(t *testing.T) {
	data := []byte("the quick brown fox")
	b := Blob{Hash: sha256.Sum256(data), Size: int64(len(data))}
	v := NewBlobVerifier(b)
	if _, err := io.Copy(v, iotestHalfReader(data)); err != nil || v.Finish() != nil {
		t.Fatalf("good bytes: %v %v", err, v.Finish())
	}
	v = NewBlobVerifier(b)
	v.Write(data[:5])
	if err := v.Finish(); !errors.Is(err, ErrBlobMismatch) {
		t.Fatal("short blob accepted")
	}
	v = NewBlobVerifier(b)
	if _, err := v.Write(append(data, '!')); !errors.Is(err, ErrBlobMismatch) {
		t.Fatal("long blob accepted")
	}
}

// iotestHalfReader yields data a few bytes at a time, as a network does.
func iotestHalfReader(data []byte) io.Reader {
	return &chunky{data: data}
}

type chunky struct{ data []byte }

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), 3, len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}
