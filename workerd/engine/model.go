package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/c0mpute/c0mpute/workerd/engine/expf"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/quant"
)

// Config is the model's shape, read from the file's metadata.
type Config struct {
	Arch     string  // llama or qwen2
	Embd     int     // hidden size
	Layers   int     // block count
	Heads    int     // attention heads
	KVHeads  int     // key/value heads (grouped-query attention)
	HeadDim  int     // Embd / Heads
	RopeDim  int     // rotated dimensions per head
	FF       int     // feed-forward size
	Vocab    int     // output rows
	Context  int     // maximum positions
	Eps      float32 // RMSNorm epsilon
	RopeBase float32 // RoPE frequency base
	// RopeNeox rotates pairs (i, i+d/2) as GPT-NeoX does (qwen2);
	// otherwise adjacent pairs (2i, 2i+1) as llama does.
	RopeNeox bool
}

// Matrix is a weight matrix in its file encoding: Rows rows of Cols
// elements, row r at Data[r*RowBytes:].
type Matrix struct {
	Type     gguf.Type
	Rows     int
	Cols     int
	RowBytes int
	Data     []byte
}

// Row returns row r's bytes.
func (m *Matrix) Row(r int) []byte { return m.Data[r*m.RowBytes : (r+1)*m.RowBytes] }

type layer struct {
	attnNorm, ffnNorm []float32
	q, k, v, o        Matrix
	bq, bk, bv        []float32 // qwen2 only
	gate, up, down    Matrix
}

// Model is a loaded model, or the part of one a ring member holds: a
// contiguous range of layers, plus the embedding when the range starts at
// layer 0 and the head when it ends at the last layer. Read-only after
// loading, safe for concurrent use by any number of Stages.
type Model struct {
	cfg Config
	// first and last bound the layers held, [first, last); embed and head
	// say whether the embedding and the head are held.
	first, last int
	embed, head bool
	tokEmbd     Matrix
	// layers has one entry per layer of the whole model, so Forward
	// indexes it by layer number; entries outside [first, last) are zero.
	layers    []layer
	outNorm   []float32
	out       Matrix
	ropeFreqs []float32 // optional per-pair frequency divisors (rope_freqs.weight)
	// ropeScale is powf(freq_base, -2/rope_dim), as ggml computes it.
	ropeScale float32
	workers   int
}

// ErrUnsupported is wrapped by errors about models the engine cannot run.
var ErrUnsupported = errors.New("engine: unsupported model")

// ErrNotHeld is wrapped by errors about using what a partial Model does
// not hold: the embedding, the head, or layers outside its range.
var ErrNotHeld = errors.New("engine: not held by this part of the model")

// Load builds a Model over f's tensors (which stay in f's mapping: keep f
// open while the Model is used). workers is the number of goroutines a
// matrix product uses; 0 means GOMAXPROCS.
func Load(f *gguf.File, workers int) (*Model, error) {
	if f == nil {
		return nil, errors.New("engine: load: no file")
	}
	cfg, err := readConfig(f)
	if err != nil {
		return nil, err
	}
	return LoadParts([]*gguf.File{f}, 0, cfg.Layers, workers)
}

// LoadParts builds a Model holding layers [first, last) from files that
// together carry them, as a ring member's blobs do: the shape comes from
// the first file with general.architecture (every file that names an
// architecture must describe the same shape), and each tensor is looked up
// in every file (a tensor in more than one must be the same bytes). The
// Model holds the embedding iff first is 0 and the head iff last is the
// model's layer count; Config().Layers is the whole model's count either
// way. Tensors stay in the files' mappings: keep the files open while the
// Model is used.
func LoadParts(files []*gguf.File, first, last, workers int) (*Model, error) {
	if len(files) == 0 {
		return nil, errors.New("engine: load: no files")
	}
	var cfgFile *gguf.File
	for i, f := range files {
		if f == nil {
			return nil, fmt.Errorf("engine: load: file %d is nil", i)
		}
		if cfgFile == nil && f.Architecture() != "" {
			cfgFile = f
		}
	}
	if cfgFile == nil {
		return nil, fmt.Errorf("%w: none of the %d files sets general.architecture", ErrUnsupported, len(files))
	}
	cfg, err := readConfig(cfgFile)
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		if f == cfgFile || f.Architecture() == "" {
			continue
		}
		other, err := readConfig(f)
		if err != nil {
			return nil, fmt.Errorf("file %d: %w", i, err)
		}
		if other != cfg {
			return nil, fmt.Errorf("%w: file %d describes another model (%+v) than the first (%+v)", ErrUnsupported, i, other, cfg)
		}
	}
	if first < 0 || last > cfg.Layers || first >= last {
		return nil, fmt.Errorf("engine: load: layer range [%d, %d) outside the model's %d layers", first, last, cfg.Layers)
	}
	ts, err := index(files)
	if err != nil {
		return nil, err
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	m := &Model{cfg: cfg, first: first, last: last, embed: first == 0, head: last == cfg.Layers, workers: workers,
		layers: make([]layer, cfg.Layers)}
	m.ropeScale = float32(math.Pow(float64(cfg.RopeBase), float64(float32(-2.0)/float32(cfg.RopeDim))))
	kv := cfg.KVHeads * cfg.HeadDim
	if m.embed {
		if m.tokEmbd, err = ts.matrix("token_embd.weight", cfg.Embd, 0); err != nil {
			return nil, err
		}
		m.cfg.Vocab = m.tokEmbd.Rows
	}
	for l := first; l < last; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ly := &m.layers[l]
		for _, t := range []struct {
			dst        *Matrix
			name       string
			cols, rows int
		}{
			{&ly.q, "attn_q.weight", cfg.Embd, cfg.Heads * cfg.HeadDim},
			{&ly.k, "attn_k.weight", cfg.Embd, kv},
			{&ly.v, "attn_v.weight", cfg.Embd, kv},
			{&ly.o, "attn_output.weight", cfg.Heads * cfg.HeadDim, cfg.Embd},
			{&ly.gate, "ffn_gate.weight", cfg.Embd, cfg.FF},
			{&ly.up, "ffn_up.weight", cfg.Embd, cfg.FF},
			{&ly.down, "ffn_down.weight", cfg.FF, cfg.Embd},
		} {
			if *t.dst, err = ts.matrix(p+t.name, t.cols, t.rows); err != nil {
				return nil, err
			}
		}
		if ly.attnNorm, err = ts.vector(p+"attn_norm.weight", cfg.Embd, true); err != nil {
			return nil, err
		}
		if ly.ffnNorm, err = ts.vector(p+"ffn_norm.weight", cfg.Embd, true); err != nil {
			return nil, err
		}
		required := cfg.Arch == "qwen2"
		if ly.bq, err = ts.vector(p+"attn_q.bias", cfg.Heads*cfg.HeadDim, required); err != nil {
			return nil, err
		}
		if ly.bk, err = ts.vector(p+"attn_k.bias", kv, required); err != nil {
			return nil, err
		}
		if ly.bv, err = ts.vector(p+"attn_v.bias", kv, required); err != nil {
			return nil, err
		}
	}
	if m.head {
		if m.outNorm, err = ts.vector("output_norm.weight", cfg.Embd, true); err != nil {
			return nil, err
		}
		rows := m.tokEmbd.Rows // 0 (any) when the embedding is not held
		if _, ok := ts["output.weight"]; ok {
			if m.out, err = ts.matrix("output.weight", cfg.Embd, rows); err != nil {
				return nil, err
			}
		} else if m.embed {
			m.out = m.tokEmbd // tied embeddings
		} else if m.out, err = ts.matrix("token_embd.weight", cfg.Embd, 0); err != nil { // tied, carried for the head
			return nil, fmt.Errorf("%w (the head of a model without output.weight is token_embd.weight)", err)
		}
		m.cfg.Vocab = m.out.Rows
	}
	if !m.embed && !m.head {
		// A middle part computes nothing per vocabulary entry; report the
		// file's count when it gives one.
		if v, ok := cfgFile.ArchUint("vocab_size"); ok && v <= 1<<31 {
			m.cfg.Vocab = int(v)
		}
	}
	if m.ropeFreqs, err = ts.vector("rope_freqs.weight", cfg.RopeDim/2, false); err != nil {
		return nil, err
	}
	return m, nil
}

// Holds says which part of the model m holds: layers [first, last), and
// whether it has the embedding (Embed) and the head (Head). A Model from
// Load holds everything.
func (m *Model) Holds() (first, last int, embed, head bool) {
	return m.first, m.last, m.embed, m.head
}

// needEmbed, needHead and needLayers refuse, with what is held, calls a
// part cannot serve.
func (m *Model) needEmbed() error {
	if !m.embed {
		return fmt.Errorf("%w: embedding: this part holds layers [%d, %d) of %d; only the part holding layer 0 embeds tokens", ErrNotHeld, m.first, m.last, m.cfg.Layers)
	}
	return nil
}

func (m *Model) needHead() error {
	if !m.head {
		return fmt.Errorf("%w: head: this part holds layers [%d, %d) of %d; only the part holding the last layer computes logits", ErrNotHeld, m.first, m.last, m.cfg.Layers)
	}
	return nil
}

func (m *Model) needLayers(first, last int) error {
	if first < 0 || last > m.cfg.Layers || first >= last {
		return fmt.Errorf("engine: layer range [%d, %d) outside the model's %d layers", first, last, m.cfg.Layers)
	}
	if first < m.first || last > m.last {
		return fmt.Errorf("%w: layers [%d, %d): this part holds [%d, %d)", ErrNotHeld, first, last, m.first, m.last)
	}
	return nil
}

// tensorRef is where a tensor lives: its directory entry and its bytes.
type tensorRef struct {
	info gguf.TensorInfo
	data []byte
}

// tensors is every tensor of a set of files, by name.
type tensors map[string]tensorRef

// index collects the files' tensors; a name in several files must carry
// the same type, shape and bytes in each (a tied embedding travels with
// both the embedding and the head).
func index(files []*gguf.File) (tensors, error) {
	ts := make(tensors)
	for i, f := range files {
		for _, t := range f.Tensors {
			r := tensorRef{info: t, data: f.Bytes(t)}
			if prev, dup := ts[t.Name]; dup {
				if prev.info.Type != t.Type || !slices.Equal(prev.info.Dims, t.Dims) || !bytes.Equal(prev.data, r.data) {
					return nil, fmt.Errorf("%w: tensor %s differs between the files that carry it (file %d)", ErrUnsupported, t.Name, i)
				}
				continue
			}
			ts[t.Name] = r
		}
	}
	return ts, nil
}

func readConfig(f *gguf.File) (Config, error) {
	c := Config{Arch: f.Architecture()}
	switch c.Arch {
	case "llama":
	case "qwen2":
		c.RopeNeox = true
	default:
		return c, fmt.Errorf("%w: architecture %q (llama and qwen2 are supported)", ErrUnsupported, c.Arch)
	}
	need := func(key string, dst *int) error {
		v, ok := f.ArchUint(key)
		if !ok || v == 0 || v > 1<<24 {
			return fmt.Errorf("%w: %s.%s missing or out of range", ErrUnsupported, c.Arch, key)
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"embedding_length", &c.Embd}, {"block_count", &c.Layers}, {"attention.head_count", &c.Heads},
		{"feed_forward_length", &c.FF}, {"context_length", &c.Context},
	} {
		if err := need(k.key, k.dst); err != nil {
			return c, err
		}
	}
	c.KVHeads = c.Heads
	if v, ok := f.ArchUint("attention.head_count_kv"); ok {
		c.KVHeads = int(v)
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 || c.Embd%c.Heads != 0 {
		return c, fmt.Errorf("%w: %d heads, %d KV heads, hidden size %d", ErrUnsupported, c.Heads, c.KVHeads, c.Embd)
	}
	c.HeadDim = c.Embd / c.Heads
	c.RopeDim = c.HeadDim
	if v, ok := f.ArchUint("rope.dimension_count"); ok {
		c.RopeDim = int(v)
	}
	if c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
		return c, fmt.Errorf("%w: rope dimension %d for heads of %d", ErrUnsupported, c.RopeDim, c.HeadDim)
	}
	c.Eps = 1e-5
	if v, ok := f.ArchFloat("attention.layer_norm_rms_epsilon"); ok {
		c.Eps = float32(v)
	}
	c.RopeBase = 10000
	if v, ok := f.ArchFloat("rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	if !(c.Eps > 0) || !(c.RopeBase > 1) {
		return c, fmt.Errorf("%w: epsilon %g, rope base %g", ErrUnsupported, c.Eps, c.RopeBase)
	}
	if s, ok := f.Metadata.String(c.Arch + ".rope.scaling.type"); ok && s != "none" && s != "" {
		return c, fmt.Errorf("%w: rope scaling %q", ErrUnsupported, s)
	}
	return c, nil
}

// matrix looks up a 2-D weight with rows of cols elements; rows 0 means
// any number.
func (ts tensors) matrix(name string, cols, rows int) (Matrix, error) {
	r, ok := ts[name]
	if !ok {
		return Matrix{}, fmt.Errorf("%w: tensor %s missing", ErrUnsupported, name)
	}
	t := r.info
	if len(t.Dims) != 2 || t.Dims[0] != uint64(cols) || (rows != 0 && t.Dims[1] != uint64(rows)) {
		return Matrix{}, fmt.Errorf("%w: tensor %s has shape %v, want [%d %d]", ErrUnsupported, name, t.Dims, cols, rows)
	}
	if err := quant.CheckRow(t.Type, cols); err != nil {
		return Matrix{}, fmt.Errorf("%w: tensor %s: %w", ErrUnsupported, name, err)
	}
	return Matrix{Type: t.Type, Rows: int(t.Dims[1]), Cols: cols, RowBytes: t.Type.RowBytes(cols), Data: r.data}, nil
}

// vector decodes a 1-D tensor of n elements to float32.
func (ts tensors) vector(name string, n int, required bool) ([]float32, error) {
	r, ok := ts[name]
	if !ok {
		if required {
			return nil, fmt.Errorf("%w: tensor %s missing", ErrUnsupported, name)
		}
		return nil, nil
	}
	t := r.info
	if t.Elements() != uint64(n) {
		return nil, fmt.Errorf("%w: tensor %s has %d elements, want %d", ErrUnsupported, name, t.Elements(), n)
	}
	if err := quant.CheckRow(t.Type, n); err != nil {
		return nil, fmt.Errorf("%w: tensor %s: %w", ErrUnsupported, name, err)
	}
	v := make([]float32, n)
	quant.DequantRow(t.Type, r.data, v)
	return v, nil
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// parallel runs fn over [0, n) in chunks of grain (the last may be
// shorter) on up to m.workers goroutines, each taking the next chunk as
// it finishes one: a worker slowed by another process on a shared core
// holds back only its current chunk. fn's first argument is the
// worker's index in [0, m.workers), for per-worker scratch. The split
// only decides who computes an element, never how.
func (m *Model) parallel(n, grain int, fn func(worker, lo, hi int)) {
	grain = max(grain, 1)
	chunks := (n + grain - 1) / grain
	w := min(m.workers, chunks)
	if w <= 1 {
		fn(0, 0, n)
		return
	}
	var next atomic.Int64
	work := func(worker int) {
		for {
			c := int(next.Add(1)) - 1
			if c >= chunks {
				return
			}
			fn(worker, c*grain, min((c+1)*grain, n))
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(i)
		}()
	}
	work(0)
	wg.Wait()
}

// matGrain is the rows of a matrix product per chunk of work: about a
// sixteenth of each worker's share, so an uneven machine evens out, but
// at least 16 rows, so a chunk costs far more than taking it.
func (m *Model) matGrain(rows int) int {
	return max(16, rows/(16*m.workers))
}

// product is one matrix product of a batch: out[t] = w · x[t].
type product struct {
	w   *Matrix
	out [][]float32
}

// scratch holds the buffers of a batch's matrix products, reused from
// one call to the next by whoever owns it (a Stage: one goroutine at a
// time), so a Forward allocates nothing once they have grown to its
// batch. A nil *scratch allocates per call.
type scratch struct {
	// acts are prepared activations, one slice per weight type in use
	// (actTypes), one Act per batch row.
	actTypes []gguf.Type
	acts     [][]quant.Act
	// res is per worker: a block of up to resBlock weight rows' results,
	// one per batch row each (row-major by weight row).
	res [][]float32
}

// resBlock is the weight rows whose results a worker gathers before
// copying them into the output rows: 16 float32 are one 64-byte line of
// each output row, written as one run instead of 16 strided stores.
const resBlock = 16

// actsFor returns x prepared for weights of type t, preparing it once
// per matmuls call: the first prepared slots of sc hold this call's
// preparations, and the count of them after this one is returned.
func (sc *scratch) actsFor(t gguf.Type, x [][]float32, prepared int) ([]quant.Act, int) {
	for k := 0; k < prepared; k++ {
		if sc.actTypes[k] == t {
			return sc.acts[k][:len(x)], prepared
		}
	}
	k := prepared
	if k == len(sc.acts) {
		sc.actTypes = append(sc.actTypes, t)
		sc.acts = append(sc.acts, nil)
	}
	sc.actTypes[k] = t
	if cap(sc.acts[k]) < len(x) {
		sc.acts[k] = append(sc.acts[k][:cap(sc.acts[k])], make([]quant.Act, len(x)-cap(sc.acts[k]))...)
	}
	a := sc.acts[k][:len(x)]
	for i := range x {
		a[i].Prepare(t, x[i])
	}
	return a, k + 1
}

// matmul computes out[t] = W · x[t] for every row t of x (each of W.Cols
// elements); out has len(x) rows of W.Rows.
func (m *Model) matmul(sc *scratch, w *Matrix, x [][]float32, out [][]float32) {
	m.matmuls(sc, x, product{w, out})
}

// matmuls computes several products of the same input x (the attention's
// Q, K and V) in one parallel pass over their rows together, one
// synchronisation instead of one per matrix.
// Each weight row is read once for all of x's rows (quant.DotTile, a
// worker's block of rows per quant.DotTileRows call): the batch's tile,
// with every element computed as a batch of one computes it.
func (m *Model) matmuls(sc *scratch, x [][]float32, ps ...product) {
	if sc == nil {
		sc = new(scratch)
	}
	T := len(x)
	var actsBuf [3][]quant.Act
	acts := actsBuf[:0]
	prepared := 0
	total := 0
	for _, p := range ps {
		var a []quant.Act
		a, prepared = sc.actsFor(p.w.Type, x, prepared)
		acts = append(acts, a)
		total += p.w.Rows
	}
	sc.growRes(m.workers, resBlock*T)
	m.parallel(total, m.matGrain(total), func(worker, lo, hi int) {
		res := sc.res[worker]
		base := 0
		for i, p := range ps {
			a, b := max(lo-base, 0), min(hi-base, p.w.Rows)
			for r := a; r < b; r += resBlock {
				e := min(r+resBlock, b)
				rows := p.w.Data[r*p.w.RowBytes : e*p.w.RowBytes]
				if T == 1 {
					// Decode: the block's rows in one call (quant.DotRows).
					quant.DotRows(rows, p.w.RowBytes, &acts[i][0], res[:e-r])
				} else {
					// A batch: the block's rows against its tiles in one
					// call, res[k*T+t] for row r+k (quant.DotTileRows).
					quant.DotTileRows(rows, p.w.RowBytes, acts[i], res[:(e-r)*T])
				}
				copyBlock(p.out, r, e-r, res, T)
			}
			base += p.w.Rows
		}
	})
}

// gatedFFN computes the feed-forward's activation out[t][r] =
// float32(silu(gate·x[t]) · (up·x[t])) for each row r of gate and up (of
// equal shape) in one parallel pass: a worker takes a block of rows of
// both matrices and applies the activation to its block from its
// scratch, so the activation runs on every worker instead of after the
// pass on one, and the up products are never stored. Each product is
// DotTile's (DotTileRows'), as matmuls computes it.
func (m *Model) gatedFFN(sc *scratch, x [][]float32, gate, up *Matrix, out [][]float32) {
	if sc == nil {
		sc = new(scratch)
	}
	T := len(x)
	ga, prepared := sc.actsFor(gate.Type, x, 0)
	ua, _ := sc.actsFor(up.Type, x, prepared)
	sc.growRes(m.workers, 2*resBlock*T)
	m.parallel(gate.Rows, m.matGrain(gate.Rows), func(worker, lo, hi int) {
		rg, ru := sc.res[worker][:resBlock*T], sc.res[worker][resBlock*T:]
		for r := lo; r < hi; r += resBlock {
			e := min(r+resBlock, hi)
			gr, ur := gate.Data[r*gate.RowBytes:e*gate.RowBytes], up.Data[r*up.RowBytes:e*up.RowBytes]
			if T == 1 {
				quant.DotRows(gr, gate.RowBytes, &ga[0], rg[:e-r])
				quant.DotRows(ur, up.RowBytes, &ua[0], ru[:e-r])
			} else {
				quant.DotTileRows(gr, gate.RowBytes, ga, rg[:(e-r)*T])
				quant.DotTileRows(ur, up.RowBytes, ua, ru[:(e-r)*T])
			}
			// SiLU over the block's gate results at once (expf's vector
			// exp, bit for bit x / (1 + float32(math.Exp(float64(-x))))),
			// then the products with up, row by row.
			g := rg[:(e-r)*T]
			expf.SiLU(g, g)
			for t, o := range out[:T] {
				o = o[r:e]
				for k := range o {
					o[k] = g[k*T+t] * ru[k*T+t]
				}
			}
		}
	})
}

// growRes gives each of workers n floats of result scratch.
func (sc *scratch) growRes(workers, n int) {
	for len(sc.res) < workers {
		sc.res = append(sc.res, nil)
	}
	for i := range sc.res {
		if cap(sc.res[i]) < n {
			sc.res[i] = make([]float32, n)
		}
		sc.res[i] = sc.res[i][:n]
	}
}

// copyBlock writes n weight rows' results, res[k*T+t] for row r+k and
// batch row t, into out[t][r:r+n].
func copyBlock(out [][]float32, r, n int, res []float32, T int) {
	res = res[:n*T]
	for t, o := range out[:T] {
		o = o[r : r+n]
		for k := range o {
			o[k] = res[k*T+t]
		}
	}
}

// rmsNorm is ggml_rms_norm followed by the multiplication with the norm
// weight: the sum of squares in float64, the scale in float32.
func rmsNorm(dst, x, w []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	mean := float32(sum / float64(len(x)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	for i, v := range x {
		dst[i] = float32(v*scale) * w[i]
	}
}

// ropeAngles writes position pos's RoPE cosines and sines, interleaved,
// into cs (RopeDim elements), as ggml_rope with ext_factor 0 and
// attn_factor 1 computes them: theta advances by repeated float32
// multiplication. They depend only on the position, so a Forward
// computes them once per position for every layer, queries and keys.
func (m *Model) ropeAngles(cs []float32, pos int) {
	n := m.cfg.RopeDim
	cs = cs[:n]
	theta := float32(pos)
	for i := 0; i < n; i += 2 {
		t := theta
		if m.ropeFreqs != nil {
			t = theta / m.ropeFreqs[i/2]
		}
		cs[i] = float32(math.Cos(float64(t)))
		cs[i+1] = float32(math.Sin(float64(t)))
		theta *= m.ropeScale
	}
}

// rope rotates the first RopeDim elements of each head of v (heads of
// HeadDim) by the angles cs from ropeAngles.
func (m *Model) rope(v []float32, heads int, cs []float32) {
	c := &m.cfg
	n := c.RopeDim
	cs = cs[:n]
	for h := 0; h < heads; h++ {
		x := v[h*c.HeadDim : h*c.HeadDim+c.HeadDim]
		for i := 0; i < n; i += 2 {
			cos, sin := cs[i], cs[i+1]
			a, b := i, i+1
			if c.RopeNeox {
				a, b = i/2, i/2+n/2
			}
			x0, x1 := x[a], x[b]
			x[a] = float32(x0*cos) - float32(x1*sin)
			x[b] = float32(x0*sin) + float32(x1*cos)
		}
	}
}

func rows(flat []float32, n, width int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*width : (i+1)*width : (i+1)*width]
	}
	return out
}
