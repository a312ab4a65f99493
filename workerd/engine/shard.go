package engine

import "context"

// Shard is what one node of a pipeline runs for one sequence: a
// contiguous range of layers with its KV cache. Hidden states come from
// the previous node (or Model.Embed on the first) and go to the next (or
// Model.Head on the last), in the wire form between processes
// (EncodeHidden / DecodeHidden).
type Shard interface {
	// Range is the layer range [first, last).
	Range() (first, last int)
	// Len is the number of positions cached.
	Len() int
	// Forward runs the layers over a batch continuing the sequence
	// (h.Pos == Len()), in place, and caches the batch's keys and values.
	Forward(ctx context.Context, h *Hidden) error
	// Truncate rolls the cache back to n positions (rejected drafts).
	Truncate(n int) error
}

var _ Shard = (*Stage)(nil)
