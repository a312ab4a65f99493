package api

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/shard"
)

// fixedRings reports a fixed ring state.
type fixedRings []rings.State

func (r fixedRings) Rings() []rings.State                           { return r }
func (fixedRings) JobRing(string, string) (*relaymsg.RingJob, bool) { return nil, false }
func (fixedRings) Rejected(string, shard.Hash, int)                 {}
func (fixedRings) Settle(context.Context, rings.SettleJob) (rings.Settlement, error) {
	return rings.Settlement{}, nil
}

// /v1/models lists a ring model with its ring's stages, available only
// while the ring serves; other models are as before.
func TestModelsListRings(t *testing.T) {
	spec := &catalog.RingSpec{BlobURL: "https://blobs.example/big", MinStages: 1, MaxStages: 8, ContextTokens: 8192}
	whole := catalog.Model{ID: "small", Price: 1}
	ring := catalog.Model{ID: "big", Price: 30, Ring: spec}
	for _, tc := range []struct {
		name   string
		m      catalog.Model
		online int64
		rings  Rings
		want   string
	}{
		{"whole model online", whole, 1, nil, `"available":true,"pricing":{"credits_per_request":1,"usd_per_request":"0.01"}}`},
		{"ring serving", ring, 1, fixedRings{{Model: "big", Stages: 3, Serving: true, Candidates: 4}}, `"available":true,"pricing":{"credits_per_request":30,"usd_per_request":"0.30"},"ring":{"stages":3}}`},
		{"ring assigned, not serving", ring, 1, fixedRings{{Model: "big", Stages: 3, Candidates: 4}}, `"available":false,"pricing":{"credits_per_request":30,"usd_per_request":"0.30"},"ring":{"stages":0}}`},
		{"ring serving, its stage 0 not counted online yet", ring, 0, fixedRings{{Model: "big", Stages: 2, Serving: true}}, `"available":false,"pricing":{"credits_per_request":30,"usd_per_request":"0.30"},"ring":{"stages":2}}`},
		{"no rings formed here", ring, 1, nil, `"available":false,"pricing":{"credits_per_request":30,"usd_per_request":"0.30"},"ring":{"stages":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{rings: tc.rings}
			b, err := json.Marshal(toModelJSON(tc.m, map[string]int64{tc.m.ID: tc.online}, s.servingRings()))
			if err != nil {
				t.Fatal(err)
			}
			want := `{"id":"` + tc.m.ID + `","object":"model","created":1767225600,"owned_by":"c0mpute",` + tc.want
			if string(b) != want {
				t.Errorf("got  %s\nwant %s", b, want)
			}
		})
	}
}
