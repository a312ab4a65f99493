package speculate

import (
	"context"
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

func internalDrafter(t *testing.T) *modelDrafter {
	t.Helper()
	b, err := testmodel.Bytes(testmodel.Options{Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(f, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newModelDrafter(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// A history that extends the last one by drafted tokens is answered from
// the greedy tokens already computed, without running the model, and a
// prefetch does the computing for the Draft that follows it.
func TestModelReusesDrafts(t *testing.T) {
	d := internalDrafter(t)
	ctx := context.Background()
	h := []int32{300, 301, 302, 303, 304}
	g, err := d.Draft(ctx, h, 8)
	if err != nil || len(g) != 8 {
		t.Fatalf("Draft = %v, %v", g, err)
	}
	cached, computed := d.stage.Len(), len(d.toks)
	again, err := d.Draft(ctx, append(slices.Clone(h), g[:3]...), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, g[3:]) {
		t.Fatalf("Draft after 3 accepted drafts = %v, want the rest %v", again, g[3:])
	}
	if d.stage.Len() != cached || len(d.toks) != computed {
		t.Fatalf("the model ran (cache %d → %d positions, %d → %d tokens) for drafts it had", cached, d.stage.Len(), computed, len(d.toks))
	}

	// A prefetch after all 8, and the Draft once the loop accepted them
	// all plus the model's own next token: the prefetch computed it.
	full := append(slices.Clone(h), g...)
	d.Prefetch(full, 8)
	pf := d.pf
	<-pf.done
	if len(pf.got) != 8 {
		t.Fatalf("the prefetch drafted %d tokens, want 8", len(pf.got))
	}
	cached, computed = d.stage.Len(), len(d.toks)
	next, err := d.Draft(ctx, append(slices.Clone(full), pf.got[0]), 7)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next, pf.got[1:]) {
		t.Fatalf("Draft after the prefetch = %v, want its tokens %v", next, pf.got[1:])
	}
	if d.stage.Len() != cached || len(d.toks) != computed {
		t.Fatal("the model ran for drafts the prefetch had computed")
	}
	if d.pf != nil {
		t.Fatal("Draft left the prefetch pending")
	}
}

// serves decides whether a Draft waits for a prefetch or cancels it.
func TestPrefetchServes(t *testing.T) {
	pf := &prefetch{history: []int32{1, 2, 3}, got: []int32{7, 8}}
	for _, c := range []struct {
		history []int32
		want    bool
	}{
		{[]int32{1, 2, 3}, true},
		{[]int32{1, 2, 3, 7}, true},
		{[]int32{1, 2, 3, 7, 8}, true},
		{[]int32{1, 2, 3, 7, 8, 9}, true}, // 9 may be the next draft
		{[]int32{1, 2, 3, 7, 9}, false},
		{[]int32{1, 2, 3, 6}, false},
		{[]int32{1, 2}, false}, // a prefix: its drafts would differ
		{[]int32{1, 5, 3, 7}, false},
	} {
		if got := pf.serves(c.history); got != c.want {
			t.Errorf("serves(%v) = %t, want %t", c.history, got, c.want)
		}
	}
}
