package api

import (
	"context"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/shard"
)

// Rings forms and settles the rings of the catalogue's ring models
// (rings.Former): /v1/models lists their state, a ring model's job carries
// its serving plan, and its done is settled by verifying every stage's
// receipt.
type Rings interface {
	Rings() []rings.State
	JobRing(model, ticket string) (*relaymsg.RingJob, bool)
	Settle(ctx context.Context, job rings.SettleJob) (rings.Settlement, error)
	// Rejected voids the plan a rejected settlement names its culprit in
	// and keeps the culprit out of the model's rings for a while.
	Rejected(model string, plan shard.Hash, stage int)
}

type pricingJSON struct {
	// CreditsPerRequest is the flat price; USDPerRequest the same in
	// dollars, exact to the cent.
	CreditsPerRequest int64  `json:"credits_per_request"`
	USDPerRequest     string `json:"usd_per_request"`
}

type modelJSON struct {
	ID        string      `json:"id"`
	Object    string      `json:"object"`
	Created   int64       `json:"created"`
	OwnedBy   string      `json:"owned_by"`
	Available bool        `json:"available"`
	Pricing   pricingJSON `json:"pricing"`
	Aliases   []string    `json:"aliases,omitempty"`
	Note      string      `json:"note,omitempty"`
	// Ollama and MemoryMiB tell `workerd setup` which Ollama model serves
	// this one and the memory it needs (catalog.Model).
	Ollama    string `json:"ollama,omitempty"`
	MemoryMiB int64  `json:"memory_mib,omitempty"`
	// Ring is set for a ring model (served by a ring of workers, each
	// holding a layer range): its serving ring's stages, 0 while none
	// serves.
	Ring *ringJSON `json:"ring,omitempty"`
}

type ringJSON struct {
	Stages int `json:"stages"`
}

// modelCreated is a fixed creation time: the catalogue is configuration
// and has no real one, and a changing value would defeat client caches.
const modelCreated = 1767225600 // 2026-01-01T00:00:00Z

// toModelJSON lists m; rings are the serving rings by model id. A ring
// model is available only while its ring serves (its first stage is then
// the one registered worker serving it).
func toModelJSON(m catalog.Model, online map[string]int64, rings map[string]rings.State) modelJSON {
	owner := m.OwnedBy
	if owner == "" {
		owner = "c0mpute"
	}
	out := modelJSON{ID: m.ID, Object: "model", Created: modelCreated, OwnedBy: owner, Available: online[m.ID] > 0,
		Pricing: pricingJSON{CreditsPerRequest: m.Price, USDPerRequest: usd(m.Price)}, Aliases: m.Aliases, Note: m.Note,
		Ollama: m.Ollama, MemoryMiB: m.MemoryMiB}
	if m.Ring != nil {
		r := rings[m.ID]
		out.Ring = &ringJSON{Stages: r.Stages}
		out.Available = out.Available && r.Serving
	}
	return out
}

// servingRings are the serving rings by model id.
func (s *Server) servingRings() map[string]rings.State {
	if s.rings == nil {
		return nil
	}
	out := map[string]rings.State{}
	for _, r := range s.rings.Rings() {
		if r.Serving {
			out[r.Model] = r
		}
	}
	return out
}

// online counts registered workers per model, from the store's counters
// (through the cache): listing the models costs no read of the workers.
func (s *Server) online(r *http.Request) (map[string]int64, error) {
	st, err := s.networkStats(r.Context())
	if err != nil {
		return nil, err
	}
	return st.WorkersByModel, nil
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) error {
	online, err := s.online(r)
	if err != nil {
		return err
	}
	out := listJSON[modelJSON]{Object: "list", Data: []modelJSON{}}
	serving := s.servingRings()
	for _, m := range s.catalog.Models() {
		out.Data = append(out.Data, toModelJSON(m, online, serving))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	m, ok := s.catalog.Resolve(id)
	if !ok {
		return oaiwire.ModelNotFound(id)
	}
	online, err := s.online(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toModelJSON(m, online, s.servingRings()))
}

type statsJSON struct {
	Object           string           `json:"object"`
	WorkersOnline    int64            `json:"workers_online"`
	WorkersByModel   map[string]int64 `json:"workers_by_model"`
	QueueDepth       int64            `json:"queue_depth"`
	QueueByModel     map[string]int64 `json:"queue_by_model"`
	JobsCompleted    int64            `json:"jobs_completed"`
	TokensServed     int64            `json:"tokens_served"`
	NetworkTokPerSec float64          `json:"network_tokens_per_second"`
}

// stats serves GET /v1/stats from the store's counters, read at most
// every statsCacheTTL by an instance: no figure costs a scan.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.networkStats(r.Context())
	if err != nil {
		return err
	}
	var depth int64
	for _, n := range st.QueueByModel {
		depth += n
	}
	return writeJSON(w, http.StatusOK, statsJSON{Object: "stats", WorkersOnline: st.WorkersOnline,
		WorkersByModel: nonNil(st.WorkersByModel), QueueDepth: depth, QueueByModel: nonNil(st.QueueByModel),
		JobsCompleted: st.JobsCompleted, TokensServed: st.TokensServed, NetworkTokPerSec: float64(st.TokensLastMinute) / 60})
}

func nonNil(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}
