// Encodes instructions, accounts and events with @coral-xyz/anchor from an
// IDL, for the Go tests to compare byte for byte with the generated clients.
// Anchor derives every PDA and fixed address itself, so account metas are
// checked too.
//
// stdin:  {"idl": "path.json", "cases": [
//           {"kind": "instruction", "name": "stake", "args": {...}, "accounts": {...}},
//           {"kind": "account", "name": "StakeAccount", "value": {...}},
//           {"kind": "event", "name": "Staked", "value": {...}}]}
// stdout: [{"data": "<hex>", "keys": [{"pubkey","signer","writable"}], "program": "<base58>"}, ...]
//
// Values: integers of 64 bits and more are decimal strings, public keys
// base58 strings; names are the IDL's snake_case ones.
import { readFileSync } from "node:fs";
import anchor from "@coral-xyz/anchor";
import web3 from "@solana/web3.js";

const { AnchorProvider, BN, Program } = anchor;
const { Connection, Keypair, PublicKey } = web3;

const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
const lowerFirst = (s) => s[0].toLowerCase() + s.slice(1);

// convert turns JSON values into what Anchor's coders expect, guided by the
// IDL type.
function convert(ty, v, idl) {
  if (typeof ty === "string") {
    switch (ty) {
      case "u64": case "i64": case "u128": case "i128":
        return new BN(String(v));
      case "pubkey":
        return new PublicKey(v);
      default:
        return v;
    }
  }
  if (ty.vec) return v.map((x) => convert(ty.vec, x, idl));
  if (ty.option) return v === null ? null : convert(ty.option, v, idl);
  if (ty.array) return v.map((x) => convert(ty.array[0], x, idl));
  if (ty.defined) {
    const def = idl.types.find((t) => t.name === ty.defined.name);
    if (!def) throw new Error(`type ${ty.defined.name} not in the IDL`);
    return convertStruct(def.type.fields, v, idl);
  }
  throw new Error(`unsupported type ${JSON.stringify(ty)}`);
}

function convertStruct(fields, v, idl) {
  const out = {};
  for (const f of fields) {
    if (!(f.name in v)) throw new Error(`missing field ${f.name}`);
    out[camel(f.name)] = convert(f.type, v[f.name], idl);
  }
  return out;
}

const input = JSON.parse(readFileSync(0, "utf8"));
const idl = JSON.parse(readFileSync(input.idl, "utf8"));
if (input.address) idl.address = input.address;
// Anchor only needs a provider to build instructions; nothing is sent.
const provider = new AnchorProvider(new Connection("http://127.0.0.1:1"), {
  publicKey: Keypair.generate().publicKey,
  signTransaction: async (t) => t,
  signAllTransactions: async (t) => t,
}, {});
const program = new Program(idl, provider);
const hex = (b) => Buffer.from(b).toString("hex");

const out = [];
for (const c of input.cases) {
  if (c.kind === "instruction") {
    const ix = idl.instructions.find((i) => i.name === c.name);
    if (!ix) throw new Error(`instruction ${c.name} not in the IDL`);
    const args = ix.args.map((a) => convert(a.type, c.args[a.name], idl));
    const accounts = {};
    for (const [k, v] of Object.entries(c.accounts)) accounts[camel(k)] = new PublicKey(v);
    const built = await program.methods[camel(c.name)](...args).accounts(accounts).instruction();
    out.push({
      data: hex(built.data),
      program: built.programId.toBase58(),
      keys: built.keys.map((k) => ({ pubkey: k.pubkey.toBase58(), signer: k.isSigner, writable: k.isWritable })),
    });
  } else if (c.kind === "account") {
    const def = idl.types.find((t) => t.name === c.name);
    const data = await program.coder.accounts.encode(lowerFirst(c.name), convertStruct(def.type.fields, c.value, idl));
    out.push({ data: hex(data) });
  } else if (c.kind === "event") {
    const ev = idl.events.find((e) => e.name === c.name);
    const def = idl.types.find((t) => t.name === c.name);
    const body = program.coder.types.encode(lowerFirst(c.name), convertStruct(def.type.fields, c.value, idl));
    out.push({ data: hex(Buffer.concat([Buffer.from(ev.discriminator), body])) });
  } else {
    throw new Error(`unknown case kind ${c.kind}`);
  }
}
process.stdout.write(JSON.stringify(out));
