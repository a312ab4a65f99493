// Package onchain is c0mpute's Solana logic on top of the generated Anchor
// clients in clients/: the program and mint configuration, PDAs and
// associated token accounts, token instructions (classic SPL for USDC,
// Token-2022 for ZERO), instruction builders for zero_staking and
// zero_rewards, and transaction assembly (compute budget, priority fee,
// legacy or v0 with address lookup tables, packing many instructions per
// transaction under the size limit).
//
// Sending, confirming and looking transactions up lives in onchain/chain;
// deposit verification in onchain/deposit; stake reading in onchain/stakes;
// the keeper's plans and executor in onchain/keeper.
package onchain
