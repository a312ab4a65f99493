// Quotes PumpSwap buys with the official @pump-fun/pump-swap-sdk
// (buyQuoteInput, computeFeesBps), for the Go test to compare to the base
// unit.
//
// stdin:  [{"global": {lp, protocol, creator, creator_fee_configurable},
//           "fee_config": null | {flat, exotic, tiers: [{threshold, fees}],
//                                 stable_tiers: [...]}   (fees: {lp, protocol, creator})
//           "pool": {base_mint, quote_mint, creator, coin_creator,
//                    is_mayhem_mode, virtual_quote_reserves, creator_fee_bps},
//           "base_supply", "base_reserve", "quote_reserve", "quote_in"}, ...]
//          (every number a decimal string)
// stdout: [{"base": "<decimal>", "fees": {lp, protocol, creator}}, ...]
import { readFileSync } from "node:fs";
import { buyQuoteInput, computeFeesBps } from "@pump-fun/pump-swap-sdk";
import web3 from "@solana/web3.js";
import BN from "bn.js";

const pk = (s) => new web3.PublicKey(s);
const bn = (s) => new BN(s);
const fees = (f) => ({ lpFeeBps: bn(f.lp), protocolFeeBps: bn(f.protocol), creatorFeeBps: bn(f.creator) });
const tiers = (ts) => ts.map((t) => ({ marketCapLamportsThreshold: bn(t.threshold), fees: fees(t.fees) }));

const out = [];
for (const c of JSON.parse(readFileSync(0, "utf8"))) {
  const globalConfig = {
    lpFeeBasisPoints: bn(c.global.lp),
    protocolFeeBasisPoints: bn(c.global.protocol),
    coinCreatorFeeBasisPoints: bn(c.global.creator),
    creatorFeeConfigurable: c.global.creator_fee_configurable,
  };
  const feeConfig = c.fee_config && {
    flatFees: fees(c.fee_config.flat),
    exoticFlatFees: fees(c.fee_config.exotic),
    feeTiers: tiers(c.fee_config.tiers),
    stableFeeTiers: tiers(c.fee_config.stable_tiers),
  };
  const p = c.pool;
  const args = {
    baseReserve: bn(c.base_reserve),
    virtualQuoteReserves: bn(p.virtual_quote_reserves),
    globalConfig,
    baseMintAccount: { supply: BigInt(c.base_supply) },
    baseMint: pk(p.base_mint),
    coinCreator: pk(p.coin_creator),
    creator: pk(p.creator),
    feeConfig,
    quoteMint: pk(p.quote_mint),
    isMayhemMode: p.is_mayhem_mode,
    creatorFeeBps: bn(p.creator_fee_bps),
  };
  const { base } = buyQuoteInput({ ...args, quote: bn(c.quote_in), slippage: 0, quoteReserve: bn(c.quote_reserve) });
  const f = computeFeesBps({
    globalConfig, feeConfig, creator: args.creator, baseMintSupply: bn(c.base_supply), baseMint: args.baseMint,
    baseReserve: args.baseReserve, quoteReserve: bn(c.quote_reserve).add(args.virtualQuoteReserves),
    quoteMint: args.quoteMint, isMayhemMode: p.is_mayhem_mode, creatorFeeBps: args.creatorFeeBps,
  });
  out.push({ base: base.toString(), fees: { lp: f.lpFeeBps.toString(), protocol: f.protocolFeeBps.toString(), creator: f.creatorFeeBps.toString() } });
}
process.stdout.write(JSON.stringify(out));
