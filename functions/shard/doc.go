// Package shard places and settles sharded jobs: a model too big for one
// contributor GPU runs as a ring of contributors, each holding a layer range.
//
// The package is shared by the gateway and workerd, so every party computes
// the same answer from the same signed inputs:
//
//   - records: capability records, RTT matrix rows, model descriptors, plan
//     parameters, member acceptances, manifests, jobs and stage receipts —
//     each signed with the signer's ed25519 (Solana) key over a canonical
//     binary encoding prefixed by a per-record domain tag (see canonical.go
//     and README.md);
//   - Plan: a pure deterministic function from those inputs to a ring of
//     stages, with a hash any member can recompute;
//   - Accept: a member's recompute-compare-probe-sign step;
//   - Manifest and Pull: layer blobs re-hashed byte for byte as they arrive;
//   - Verify: checks a job's stage receipts and splits its earnings.
//
// Nothing here reads a clock or a random source on its own: times, nonces
// and seeds come in as inputs, which is what makes plans reproducible.
package shard
