package setup

import (
	"cmp"
	"slices"
)

// Candidate is a catalogue model a worker could serve, with what the
// network has of it now.
type Candidate struct {
	CatalogModel
	Workers int64
	Queued  int64
	// Fits says MemoryMiB is at most the machine's memory.
	Fits bool
}

// Recommendation is the catalogue sorted for this machine.
type Recommendation struct {
	// Ranked are the models that fit, the most needed first.
	Ranked []Candidate
	// TooBig are the models with an Ollama model that need more memory
	// than the machine has, the smallest first.
	TooBig []Candidate
	// NoOllama are the ids no Ollama model serves (setup cannot set them
	// up).
	NoOllama []string
}

// Recommend ranks models for a machine with memMiB of memory: those that
// fit, by need (the fewest workers online for their queue depth first:
// (queued+1)/(workers+1), compared without division), then by the larger
// memory need (the bigger model, when the need is equal, is the one fewer
// machines can serve), then by id.
func Recommend(models []CatalogModel, st Stats, memMiB int64) Recommendation {
	var r Recommendation
	for _, m := range models {
		if m.Ollama == "" {
			r.NoOllama = append(r.NoOllama, m.ID)
			continue
		}
		c := Candidate{CatalogModel: m, Workers: st.WorkersByModel[m.ID], Queued: st.QueueByModel[m.ID]}
		c.Fits = m.MemoryMiB <= memMiB
		if c.Fits {
			r.Ranked = append(r.Ranked, c)
		} else {
			r.TooBig = append(r.TooBig, c)
		}
	}
	slices.SortFunc(r.Ranked, func(a, b Candidate) int {
		// a before b when (a.Queued+1)/(a.Workers+1) > (b.Queued+1)/(b.Workers+1).
		if c := cmp.Compare((b.Queued+1)*(a.Workers+1), (a.Queued+1)*(b.Workers+1)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.MemoryMiB, a.MemoryMiB); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	slices.SortFunc(r.TooBig, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.ID, b.ID))
	})
	return r
}
