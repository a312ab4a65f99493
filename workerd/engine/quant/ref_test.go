package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// The straightforward K-quant kernels, kept as the reference the
// unrolled ones in quant.go must match bit for bit.

// dotQ4K is ggml_vec_dot_q4_K_q8_K's reference: eight integer lanes per
// super-block, scaled into eight float lanes, mins subtracted, lanes
// summed at the end — the same float operations in the same order.
func dotQ4KRef(row []byte, a *Act) float32 {
	nb := len(a.D)
	row = row[:nb*q4KBytes]
	var sums [8]float32
	var sumf float32
	for b := 0; b < nb; b++ {
		blk := row[b*q4KBytes : (b+1)*q4KBytes]
		sc, mn := scaleMinK4(blk[4:16])
		qs := blk[16:144]
		q8 := a.Q[b*QKK : (b+1)*QKK]
		bsums := a.Sums[b*16 : (b+1)*16]
		var summ int32
		for j := 0; j < 16; j++ {
			summ += int32(bsums[j]) * int32(mn[j/2])
		}
		var aux [8]int32
		for j := 0; j < 4; j++ { // 64 elements: low nibbles then high nibbles of 32 bytes
			q := qs[j*32 : j*32+32]
			lo := q8[j*64 : j*64+32]
			hi := q8[j*64+32 : j*64+64]
			var pl, ph [8]int32
			for k := 0; k < 32; k += 8 {
				for l := 0; l < 8; l++ {
					pl[l] += int32(q[k+l]&0xF) * int32(lo[k+l])
					ph[l] += int32(q[k+l]>>4) * int32(hi[k+l])
				}
			}
			s1, s2 := int32(sc[2*j]), int32(sc[2*j+1])
			for l := 0; l < 8; l++ {
				aux[l] += s1*pl[l] + s2*ph[l]
			}
		}
		d := f16at(blk, 0) * a.D[b]
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux[l]))
		}
		dmin := f16at(blk, 2) * a.D[b]
		sumf -= float32(dmin * float32(summ))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// dotQ6K is ggml_vec_dot_q6_K_q8_K's reference, lane for lane.
func dotQ6KRef(row []byte, a *Act) float32 {
	nb := len(a.D)
	row = row[:nb*q6KBytes]
	var sums [8]float32
	var a8 [QKK]int8
	for b := 0; b < nb; b++ {
		blk := row[b*q6KBytes : (b+1)*q6KBytes]
		unpackQ6K(blk, &a8)
		q8 := a.Q[b*QKK : (b+1)*QKK]
		scales := i8s(blk[192:208])
		var aux [8]int32
		for j := 0; j < 16; j++ {
			s := int32(scales[j])
			x := a8[j*16 : j*16+16]
			y := q8[j*16 : j*16+16]
			for l := 0; l < 8; l++ {
				aux[l] += s * (int32(x[l])*int32(y[l]) + int32(x[l+8])*int32(y[l+8]))
			}
		}
		d := f16at(blk, 208) * a.D[b]
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux[l]))
		}
	}
	var sumf float32
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// TestKQuantKernelsMatchReference: the unrolled kernels give the
// reference kernels' bits.
func TestKQuantKernelsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 200; trial++ {
		n := 256 * (1 + trial%4)
		x := normalVector(r, n)
		var a Act
		a.Prepare(gguf.Q4_K, x)
		row := randomRow(r, gguf.Q4_K, n)
		if got, want := dotQ4K(row, &a), dotQ4KRef(row, &a); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Q4_K trial %d: %g, reference %g", trial, got, want)
		}
		a.Prepare(gguf.Q6_K, x)
		row = randomRow(r, gguf.Q6_K, n)
		if got, want := dotQ6K(row, &a), dotQ6KRef(row, &a); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Q6_K trial %d: %g, reference %g", trial, got, want)
		}
	}
}

func BenchmarkKQuantRef(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n = 4096
	x := normalVector(r, n)
	for _, c := range []struct {
		typ      gguf.Type
		opt, ref func([]byte, *Act) float32
	}{{gguf.Q4_K, dotQ4K, dotQ4KRef}, {gguf.Q6_K, dotQ6K, dotQ6KRef}} {
		row := randomRow(r, c.typ, n)
		var a Act
		a.Prepare(c.typ, x)
		b.Run(c.typ.String()+"/unrolled", func(b *testing.B) {
			for b.Loop() {
				c.opt(row, &a)
			}
		})
		b.Run(c.typ.String()+"/reference", func(b *testing.B) {
			for b.Loop() {
				c.ref(row, &a)
			}
		})
	}
}

// TestQ8_0AVX2MatchesPortable: the assembly block sums give the portable
// kernel's bits, including weights of -128.
func TestQ8_0AVX2MatchesPortable(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for trial := 0; trial < 300; trial++ {
		n := 32 * (1 + trial%150)
		x := normalVector(r, n)
		var a Act
		a.Prepare(gguf.Q8_0, x)
		row := randomRow(r, gguf.Q8_0, n)
		if trial%3 == 0 {
			row[2] = 0x80 // -128
		}
		if got, want := dotQ8_0(row, &a), dotQ8_0Portable(row, &a); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("trial %d (%d elements): %g, portable %g", trial, n, got, want)
		}
	}
}

func TestKQuantPortableMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 100; trial++ {
		n := 256 * (1 + trial%4)
		x := normalVector(r, n)
		var a Act
		a.Prepare(gguf.Q4_K, x)
		row := randomRow(r, gguf.Q4_K, n)
		if got, want := dotQ4KPortable(row, &a), dotQ4KRef(row, &a); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("trial %d: %g, reference %g", trial, got, want)
		}
		a.Prepare(gguf.Q6_K, x)
		row = randomRow(r, gguf.Q6_K, n)
		if got, want := dotQ6KPortable(row, &a), dotQ6KRef(row, &a); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Q6_K trial %d: %g, reference %g", trial, got, want)
		}
	}
}

// TestFloatDotsAnyLength: the vectorised float dots with their scalar
// tails agree with a float64 reference at every length.
func TestFloatDotsAnyLength(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for n := 1; n <= 100; n++ {
		w, x, h := make([]float32, n), make([]float32, n), make([]uint16, n)
		var want, want16, mag float64
		for i := range x {
			w[i], x[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			h[i] = F32ToF16(w[i])
			want += float64(w[i] * x[i])
			want16 += float64(F16ToF32(h[i]) * x[i])
			mag += math.Abs(float64(w[i] * x[i]))
		}
		if got := dotF32(w, x); math.Abs(float64(got)-want) > 1e-6*mag {
			t.Fatalf("F32 n=%d: %g, want %g", n, got, want)
		}
		if got := DotF16(h, x); math.Abs(float64(got)-want16) > 1e-6*mag {
			t.Fatalf("F16 n=%d: %g, want %g", n, got, want16)
		}
	}
}

// TestDotTileIsDot: the tiled products give each activation exactly the
// bits of its own Dot, for every type, batch sizes 1 to 17 (whole tiles
// of sixteen, eight and four, and remainders) and rows of several
// lengths (Q8_0: block counts that are and are not multiples of four
// and of eight; F32/F16: lengths that are not multiples of the vector
// width) — the batch-size independence speculative decoding relies on.
func TestDotTileIsDot(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	lengths := map[gguf.Type][]int{
		gguf.F32:  {16, 100, 256, 1037},
		gguf.F16:  {16, 100, 256, 1037},
		gguf.Q8_0: {32, 128, 160, 256, 384, 416, 1024},
		gguf.Q4_K: {256, 512, 768, 1280},
		gguf.Q6_K: {256, 512, 768, 1280},
	}
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		for _, n := range lengths[typ] {
			for batch := 1; batch <= 17; batch++ {
				row := randomRow(r, typ, n)
				if typ == gguf.Q8_0 && batch%2 == 0 {
					row[2] = 0x80 // a weight of -128
				}
				acts := make([]Act, batch)
				for i := range acts {
					x := normalVector(r, n)
					acts[i].Prepare(typ, x)
				}
				out := make([]float32, len(acts))
				DotTile(row, acts, out)
				for i := range acts {
					if want := Dot(row, &acts[i]); math.Float32bits(out[i]) != math.Float32bits(want) {
						t.Fatalf("%s n=%d, %d activations: activation %d: tile %g, alone %g", typ, n, batch, i, out[i], want)
					}
				}
			}
		}
	}
}

// TestTilesRun: with AVX2 the Q8_0 and K-quant tiles (eight
// activations, then four) take every whole tile DotTile hands them
// (TestDotTileIsDot would pass through the one-at-a-time fallback too),
// and stop at an activation of another length.
func TestTilesRun(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: DotTile runs Dot per activation")
	}
	r := rand.New(rand.NewPCG(17, 18))
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		tiles := kTiles
		if typ == gguf.Q8_0 {
			tiles = q8_0Tiles
		}
		const n = 512
		row := randomRow(r, typ, n)
		acts := make([]Act, 15)
		for i := range acts {
			x := normalVector(r, n)
			acts[i].Prepare(typ, x)
		}
		out := make([]float32, len(acts))
		if got := tiles(row, acts, out); got != 12 {
			t.Fatalf("%s: the tiles took %d of 15 activations, want 12 (8 + 4)", typ, got)
		}
		acts[9].Prepare(typ, make([]float32, 2*n))
		if got := tiles(row, acts, out); got != 8 {
			t.Fatalf("%s: with activation 9 of another length the tiles took %d, want 8", typ, got)
		}
	}
}

// TestQuantizeQ8KVecIsPortable: the assembly Q8_K quantization gives the
// portable kernel's quants, sums and scales bit for bit, on random blocks
// and on the edge cases of its maximum search and rounding: ties of +amax
// and -amax in either order (the first one sets the sign), zero and
// negative-zero blocks, NaNs (ignored by the search), infinities, values
// at rounding midpoints, subnormal and huge magnitudes.
func TestQuantizeQ8KVecIsPortable(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: only the portable kernel runs")
	}
	r := rand.New(rand.NewPCG(19, 20))
	edits := []func(b []float32){
		func(b []float32) {},
		func(b []float32) { b[7], b[200] = -5, 5 },
		func(b []float32) { b[7], b[200] = 5, -5 },
		func(b []float32) { clear(b) },
		func(b []float32) {
			for i := range b {
				b[i] = float32(math.Copysign(0, -1))
			}
		},
		func(b []float32) { b[9], b[14] = -5, 5 }, // within one vector of 8
		func(b []float32) { b[9], b[14] = 5, -5 },
		func(b []float32) { b[3], b[100], b[255] = float32(math.NaN()), 9, float32(math.NaN()) },
		func(b []float32) {
			for i := range b {
				b[i] = float32(math.NaN())
			}
		},
		func(b []float32) { b[50] = float32(math.Inf(-1)) },
		func(b []float32) {
			for i := range b {
				b[i] = float32(i%254-127) + 0.5 // iscale 1: products at .5, ties to even
			}
			b[0] = -127
		},
		func(b []float32) {
			for i := range b {
				b[i] *= 1e-40
			}
		},
		func(b []float32) {
			for i := range b {
				b[i] *= 1e30
			}
		},
	}
	for _, nb := range []int{1, 3} {
		for _, edit := range edits {
			x := normalVector(r, nb*QKK)
			edit(x[(nb-1)*QKK:])
			q1, q2 := make([]int8, len(x)), make([]int8, len(x))
			d1, d2 := make([]float32, nb), make([]float32, nb)
			s1, s2 := make([]int16, nb*16), make([]int16, nb*16)
			quantizeQ8KPortable(x, q1, d1, s1)
			if !quantizeQ8KVec(x, q2, d2, s2) {
				t.Fatal("the assembly quantizer did not run")
			}
			for b := range d1 {
				if math.Float32bits(d1[b]) != math.Float32bits(d2[b]) {
					t.Fatalf("nb=%d block %d: d %g, portable %g", nb, b, d2[b], d1[b])
				}
			}
			if !slices.Equal(q1, q2) || !slices.Equal(s1, s2) {
				t.Fatalf("nb=%d: quants or sums differ from the portable kernel's", nb)
			}
		}
	}
}

// TestQuantizeQ8_0VecIsPortable: the assembly Q8_0 quantization gives the
// portable kernel's quants and F16 scales bit for bit: random blocks
// with magnitudes from F16-subnormal scales to F16 overflow, scales that
// are exact ties between two F16 values (round to even), quants at
// rounding midpoints (half away from zero), zero and -0 blocks; rows
// with a NaN or an infinity go to the portable kernel.
func TestQuantizeQ8_0VecIsPortable(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: only the portable kernel runs")
	}
	r := rand.New(rand.NewPCG(21, 22))
	const nb = 64
	check := func(name string, x []float32, wantVec bool) {
		t.Helper()
		q1, q2 := make([]int8, len(x)), make([]int8, len(x))
		d1, d2 := make([]float32, len(x)/QK8_0), make([]float32, len(x)/QK8_0)
		quantizeQ8_0Portable(x, q1, d1)
		if got := quantizeQ8_0Vec(x, q2, d2); got != wantVec {
			t.Fatalf("%s: assembly ran %v, want %v", name, got, wantVec)
		}
		quantizeQ8_0(x, q2, d2)
		for b := range d1 {
			if math.Float32bits(d1[b]) != math.Float32bits(d2[b]) {
				t.Fatalf("%s: block %d: d %g (%#x), portable %g (%#x)", name, b, d2[b], math.Float32bits(d2[b]), d1[b], math.Float32bits(d1[b]))
			}
		}
		if !slices.Equal(q1, q2) {
			t.Fatalf("%s: quants differ from the portable kernel's", name)
		}
	}
	for trial := 0; trial < 200; trial++ {
		x := make([]float32, nb*QK8_0)
		for b := 0; b < nb; b++ {
			scale := math.Ldexp(1, r.IntN(80)-50) // 2^-50 .. 2^29
			for j := 0; j < QK8_0; j++ {
				x[b*QK8_0+j] = float32(r.NormFloat64() * scale)
			}
			if b%4 == 1 {
				// amax = 127·h, h halfway between two F16 values: dd = h exactly.
				h := float32(math.Ldexp(1+float64(2*r.IntN(1024)+1)/2048, r.IntN(30)-20))
				x[b*QK8_0+r.IntN(QK8_0)] = 127 * h * float32(1-2*r.IntN(2))
				for j := 0; j < QK8_0; j++ {
					x[b*QK8_0+j] = min(x[b*QK8_0+j], 127*h)
					x[b*QK8_0+j] = max(x[b*QK8_0+j], -127*h)
				}
			}
		}
		check("random", x, true)
	}
	x := make([]float32, nb*QK8_0)
	for i := range x {
		x[i] = float32(i%254-127) + 0.5 // amax 127: id 1, products at .5
	}
	for b := 0; b < nb; b++ {
		x[b*QK8_0] = 127
	}
	check("midpoints", x, true)
	clear(x)
	check("zero", x, true)
	for i := range x {
		x[i] = float32(math.Copysign(0, -1))
	}
	check("-0", x, true)
	x[100] = float32(math.NaN())
	check("NaN", x, false)
	x[100] = float32(math.Inf(-1))
	check("Inf", x, false)
}

// TestDotRowsIsPortable: DotRows gives each row the portable kernel's
// bits, for rows packed and rows with a gap between them, one to five
// rows at a time, on random activations and on ones whose quants are all
// ±127 (beside weights of all ones: the largest integer sums), with the
// AVX-512 decode kernels where the CPU has them, the AVX2 ones, and
// (the package switches flipped) neither.
func TestDotRowsIsPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	portable := map[gguf.Type]func([]byte, *Act) float32{
		gguf.F32:  Dot,
		gguf.F16:  Dot,
		gguf.Q8_0: dotQ8_0Portable,
		gguf.Q4_K: dotQ4KPortable,
		gguf.Q6_K: dotQ6KPortable,
	}
	lengths := map[gguf.Type][]int{
		gguf.F32:  {16, 100},
		gguf.F16:  {16, 100},
		gguf.Q8_0: {32, 416},
		gguf.Q4_K: {256, 512, 1024, 1280},
		gguf.Q6_K: {256, 512, 1024, 1280},
	}
	vec, vec512 := haveKTiles, haveRowsAVX512
	defer func() { haveKTiles, haveRowsAVX512 = vec, vec512 }()
	for _, kernels := range []struct{ vec, vec512 bool }{{vec, vec512}, {vec, false}, {false, false}} {
		haveKTiles, haveRowsAVX512 = kernels.vec, kernels.vec512
		for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
			for _, n := range lengths[typ] {
				for _, gap := range []int{0, 16} {
					for trial := range 10 {
						rows := 1 + trial%5
						rowBytes := typ.RowBytes(n) + gap
						data := make([]byte, rows*rowBytes)
						x := make([]float32, n)
						for i := range rows {
							row := randomRow(r, typ, n)
							if trial == 9 {
								for j := range row {
									row[j] = 0xff
								}
								copy(row, randomRow(r, typ, n)[:min(len(row), 16)])
							}
							copy(data[i*rowBytes:], row)
						}
						for j := range x {
							x[j] = float32(r.NormFloat64())
							if trial == 9 {
								x[j] = float32(1 - 2*(j%2))
							}
						}
						var a Act
						a.Prepare(typ, x)
						out := make([]float32, rows)
						DotRows(data, rowBytes, &a, out)
						for i := range rows {
							want := portable[typ](data[i*rowBytes:(i+1)*rowBytes], &a)
							if math.Float32bits(out[i]) != math.Float32bits(want) {
								t.Fatalf("%s n=%d gap %d, kernels %+v, row %d of %d: DotRows %g, portable %g", typ, n, gap, kernels, i, rows, out[i], want)
							}
						}
					}
				}
			}
		}
	}
}

// TestKRowsRun: with AVX2 the K-quant decode kernels take DotRows' rows
// (TestDotRowsIsPortable would pass through the per-row fallback too),
// and decline an activation prepared without the tile order.
func TestKRowsRun(t *testing.T) {
	if !haveKTiles {
		t.Skip("no AVX2: DotRows runs Dot per row")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		const n = 512
		rows := append(randomRow(r, typ, n), randomRow(r, typ, n)...)
		x := normalVector(r, n)
		var a Act
		a.Prepare(typ, x)
		out := make([]float32, 2)
		if !kRows(rows, typ.RowBytes(n), &a, out) {
			t.Fatalf("%s: the decode kernel declined a prepared activation", typ)
		}
		a.QT = a.QT[:0]
		if kRows(rows, typ.RowBytes(n), &a, out) {
			t.Fatalf("%s: the decode kernel took an activation without the tile order", typ)
		}
	}
}
