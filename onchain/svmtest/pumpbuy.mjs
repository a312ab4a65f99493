// Builds PumpSwap buy instructions with the official @pump-fun/pump-swap-sdk
// (buyInstructionsNoPool), for the Go test to compare byte for byte.
//
// stdin:  {"pool": {address, base_mint, quote_mint, base_token_program,
//          quote_token_program, pool_base_token_account,
//          pool_quote_token_account, coin_creator, is_cashback_coin,
//          protocol_fee_recipient, buyback_fee_recipient},
//          "user", "base_out", "max_quote_in", "user_base_exists"}
// stdout: [{"data": "<hex>", "program", "keys": [{"pubkey","signer","writable"}]}, ...]
import { readFileSync } from "node:fs";
import { PumpAmmSdk } from "@pump-fun/pump-swap-sdk";
import web3 from "@solana/web3.js";
import BN from "bn.js";
import * as spl from "@solana/spl-token";


const { PublicKey } = web3;
const pk = (s) => new PublicKey(s);

const input = JSON.parse(readFileSync(0, "utf8"));
const p = input.pool;
const user = pk(input.user);
const baseTokenProgram = pk(p.base_token_program);
const quoteTokenProgram = pk(p.quote_token_program);
const tokenAccountInfo = (owner) => ({ owner, lamports: 2039280, data: Buffer.alloc(165), executable: false });
const state = {
  // One recipient each, so that the SDK's random pick is determined.
  globalConfig: {
    protocolFeeRecipients: [pk(p.protocol_fee_recipient)],
    buybackFeeRecipients: [pk(p.buyback_fee_recipient)],
    reservedFeeRecipient: pk(p.protocol_fee_recipient),
    reservedFeeRecipients: [],
  },
  feeConfig: null,
  poolKey: pk(p.address),
  poolAccountInfo: null,
  pool: {
    baseMint: pk(p.base_mint),
    quoteMint: pk(p.quote_mint),
    poolBaseTokenAccount: pk(p.pool_base_token_account),
    poolQuoteTokenAccount: pk(p.pool_quote_token_account),
    coinCreator: pk(p.coin_creator),
    isMayhemMode: false,
    isCashbackCoin: !!p.is_cashback_coin,
  },
  baseTokenProgram,
  quoteTokenProgram,
  baseMint: pk(p.base_mint),
  user,
  userBaseTokenAccount: spl.getAssociatedTokenAddressSync(pk(p.base_mint), user, true, baseTokenProgram),
  userQuoteTokenAccount: spl.getAssociatedTokenAddressSync(pk(p.quote_mint), user, true, quoteTokenProgram),
  userBaseAccountInfo: input.user_base_exists ? tokenAccountInfo(baseTokenProgram) : null,
  userQuoteAccountInfo: tokenAccountInfo(quoteTokenProgram),
};
const ixs = await new PumpAmmSdk().buyInstructionsNoPool(state, new BN(input.base_out), new BN(input.max_quote_in));
process.stdout.write(JSON.stringify(ixs.map((ix) => ({
  data: Buffer.from(ix.data).toString("hex"),
  program: ix.programId.toBase58(),
  keys: ix.keys.map((k) => ({ pubkey: k.pubkey.toBase58(), signer: k.isSigner, writable: k.isWritable })),
}))));
