// Package svmtest runs the Node test components in this folder for Go
// tests: a Solana JSON-RPC server over LiteSVM (server.mjs), where SPL
// Token, Token-2022, ATA, Memo and System run for real, and the
// @coral-xyz/anchor encoder (encode.mjs) that generated clients are checked
// against byte for byte.
//
// The harness finalizes a transaction as soon as it lands unless told
// otherwise: SetFinality delays finality as a live cluster does (~13 s on
// mainnet), for tests and benchmarks of what waiting for it costs;
// HoldFinality, LoseResponses, HideLanded and DropSends stage what a real
// cluster does on its own.
//
// Tests start what they need themselves (Start, Encode): node must be on
// PATH and `npm ci` must have run in this folder (scripts/test does it).
// When either is missing, tests skip through infra/testenv, or fail under
// C0MPUTE_REQUIRE_INTEGRATION=1.
package svmtest
