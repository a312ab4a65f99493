package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/quant"
)

// refForward is a plain float64 transcription of the llama/qwen2 forward
// pass (no cache, no quantized activations, no float16 rounding), written
// separately from the engine to check it: it returns the logits after
// the last token.
func refForward(t *testing.T, f *gguf.File, toks []int32) []float64 {
	md := f.Metadata
	arch, _ := md.String("general.architecture")
	u := func(k string) int { v, _ := md.Uint(arch + "." + k); return int(v) }
	E, L, H, KVH, FF := u("embedding_length"), u("block_count"), u("attention.head_count"), u("attention.head_count_kv"), u("feed_forward_length")
	hd := E / H
	eps, _ := md.Float(arch + ".attention.layer_norm_rms_epsilon")
	base, _ := md.Float(arch + ".rope.freq_base")
	mat := func(name string) [][]float64 {
		ti, ok := f.Tensor(name)
		if !ok {
			return nil
		}
		cols := int(ti.Dims[0])
		rowsN := 1
		if len(ti.Dims) > 1 {
			rowsN = int(ti.Dims[1])
		}
		rb := ti.Type.RowBytes(cols)
		data := f.Bytes(ti)
		out := make([][]float64, rowsN)
		buf := make([]float32, cols)
		for r := range out {
			quant.DequantRow(ti.Type, data[r*rb:(r+1)*rb], buf)
			out[r] = make([]float64, cols)
			for i, v := range buf {
				out[r][i] = float64(v)
			}
		}
		return out
	}
	mv := func(w [][]float64, x []float64) []float64 {
		y := make([]float64, len(w))
		for r := range w {
			for i, v := range w[r] {
				y[r] += v * x[i]
			}
		}
		return y
	}
	norm := func(x []float64, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(x))+eps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * s * w[i]
		}
		return y
	}
	rope := func(x []float64, heads, pos int) {
		for h := 0; h < heads; h++ {
			for i := 0; i < hd/2; i++ {
				theta := float64(pos) * math.Pow(base, -2*float64(i)/float64(hd))
				a, b := h*hd+2*i, h*hd+2*i+1
				if arch == "qwen2" {
					a, b = h*hd+i, h*hd+i+hd/2
				}
				x0, x1 := x[a], x[b]
				x[a] = x0*math.Cos(theta) - x1*math.Sin(theta)
				x[b] = x0*math.Sin(theta) + x1*math.Cos(theta)
			}
		}
	}
	emb := mat("token_embd.weight")
	T := len(toks)
	hs := make([][]float64, T)
	for i, tk := range toks {
		hs[i] = append([]float64(nil), emb[tk]...)
	}
	for l := 0; l < L; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		an, fn := mat(p + "attn_norm.weight")[0], mat(p + "ffn_norm.weight")[0]
		wq, wk, wv, wo := mat(p+"attn_q.weight"), mat(p+"attn_k.weight"), mat(p+"attn_v.weight"), mat(p+"attn_output.weight")
		bias := func(name string, x []float64) {
			if b := mat(p + name); b != nil {
				for i := range x {
					x[i] += b[0][i]
				}
			}
		}
		Q, K, V := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for i := range hs {
			x := norm(hs[i], an)
			Q[i], K[i], V[i] = mv(wq, x), mv(wk, x), mv(wv, x)
			bias("attn_q.bias", Q[i])
			bias("attn_k.bias", K[i])
			bias("attn_v.bias", V[i])
			rope(Q[i], H, i)
			rope(K[i], KVH, i)
		}
		for i := range hs {
			att := make([]float64, E)
			for h := 0; h < H; h++ {
				kh := h / (H / KVH)
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					for d := 0; d < hd; d++ {
						sc[j] += Q[i][h*hd+d] * K[j][kh*hd+d]
					}
					sc[j] /= math.Sqrt(float64(hd))
					mx = max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for d := 0; d < hd; d++ {
						att[h*hd+d] += sc[j] / sum * V[j][kh*hd+d]
					}
				}
			}
			o := mv(wo, att)
			for d := range o {
				hs[i][d] += o[d]
			}
			x := norm(hs[i], fn)
			g, up := mv(mat(p+"ffn_gate.weight"), x), mv(mat(p+"ffn_up.weight"), x)
			for d := range g {
				g[d] = g[d] / (1 + math.Exp(-g[d])) * up[d]
			}
			dn := mv(mat(p+"ffn_down.weight"), g)
			for d := range dn {
				hs[i][d] += dn[d]
			}
		}
		_ = FF
	}
	out := mat("output.weight")
	if out == nil {
		out = emb
	}
	return mv(out, norm(hs[T-1], mat("output_norm.weight")[0]))
}

// TestAgainstReference checks the engine's logits against refForward.
func TestAgainstReference(t *testing.T) {
	// The reference keeps activations in float64; the engine quantizes
	// them to 8 bits for K-quant weights as llama.cpp does, hence the
	// wider tolerance there.
	for _, c := range []struct {
		o   testmodel.Options
		tol float64
	}{
		{testmodel.Options{Seed: 9, KVHeads: 2}, 0.02},
		{testmodel.Options{Seed: 9, Arch: "qwen2", Type: testmodel.F16}, 0.05},
		{testmodel.Options{Seed: 9, Type: testmodel.Q4_K, Embedding: 256, FeedForward: 256}, 0.6},
	} {
		o := c.o
		b, _ := testmodel.Bytes(o)
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		m, err := engine.Load(f, 2)
		if err != nil {
			t.Fatal(err)
		}
		toks := []int32{1, 300, 301, 302, 310}
		want := refForward(t, f, toks)
		p, _ := m.NewPipeline(nil)
		lg, err := p.Step(context.Background(), toks)
		if err != nil {
			t.Fatal(err)
		}
		got := lg.Row(len(toks) - 1)
		var worst float64
		for i := range want {
			worst = max(worst, math.Abs(want[i]-float64(got[i])))
		}
		t.Logf("%s type %d: largest logit difference from the float64 reference %g", o.Arch, o.Type, worst)
		if worst > c.tol {
			t.Errorf("%+v: engine logits differ from the reference by up to %g", o, worst)
		}
		if engine.Argmax(got) != argmax64(want) {
			t.Errorf("%+v: greedy token %d, reference %d", o, engine.Argmax(got), argmax64(want))
		}
	}
}

func argmax64(v []float64) int32 {
	b := 0
	for i := range v {
		if v[i] > v[b] {
			b = i
		}
	}
	return int32(b)
}
