// A Solana JSON-RPC server over LiteSVM, for tests only.
//
// LiteSVM is a real SVM with the SPL Token, Token-2022, ATA, Memo, System
// and Address Lookup Table programs built in: transactions, signatures and
// token programs run for real. It has no RPC server, so this file serves
// the JSON-RPC methods c0mpute's Go client calls, with the shapes a
// validator returns, plus a few svm_* methods that let a test steer what a
// real cluster does on its own (finality lag, a response lost after the
// transaction landed, blocks passing, the clock).
//
// Usage: node server.mjs  — listens on 127.0.0.1 at a free port and prints
// one line, {"url": "http://127.0.0.1:PORT", "ws_url": …}, on stdout. The
// WebSocket endpoint (PORT+1 when a port is given, as a validator's) serves
// signatureSubscribe, which @solana/web3.js confirms transactions with. It exits when
// stdin closes, so a test that dies never leaves it running.
//
// A landed transaction is "confirmed" at once and "finalized" after the
// finality delay: 0 by default, as LiteSVM has no consensus; `--finality-ms
// N` (or svm_setFinalityMs) makes it N ms, as a live cluster's ~13 s, so
// that a client's confirmation time can be measured. svm_holdFinality holds
// it back until svm_finalize instead.
//
// As a development chain (scripts/dev with C0MPUTE_CHAIN=local):
//   node server.mjs --dev DIR [--port 8899]
// also makes a test USDC mint (6 decimals, classic SPL Token), a treasury
// with its USDC account, a fee payer for x402 top-ups, and a dev wallet
// holding 100 SOL and 1,000 test USDC; their keypairs live in DIR as
// solana-keygen JSON files, kept from run to run so that addresses stay
// the same (the chain itself starts empty each time). The line on stdout
// then also names them.
import http from "node:http";
import { LiteSVM } from "litesvm";
import { WebSocketServer } from "ws";
import {
  getBase58Decoder,
  getBase58Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
} from "@solana/kit";

const b58dec = getBase58Decoder(); // bytes → string
const b58enc = getBase58Encoder(); // string → bytes
const txDecoder = getTransactionDecoder();
const msgDecoder = getCompiledTransactionMessageDecoder();

const TOKEN = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
const TOKEN22 = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";
const COMPUTE_BUDGET = "ComputeBudget111111111111111111111111111111";
const LAMPORTS_PER_SIGNATURE = 5000n;
// A blockhash stays valid for 150 blocks on a real cluster.
const BLOCKHASH_VALIDITY = 150;

const svm = new LiteSVM().withTransactionHistory(0n);
let blockHeight = 1000;
let slot = 1000n;
let blockhash = svm.latestBlockhash();
let blockhashValidUntil = blockHeight + BLOCKHASH_VALIDITY;
let unixTime = BigInt(Math.floor(Date.now() / 1000));
setClock();

const records = new Map(); // signature → record of a landed transaction
const airdrops = new Map(); // requestAirdrop's signatures → slot
let holdFinality = false; // new transactions stay "confirmed" until svm_finalize
let finalityMs = 0; // how long a landed transaction takes to be finalized
let dropSends = 0; // the next N sends answer with their signature and never land
let loseResponses = 0; // the next N sends land but answer with an error
let hideLanded = 0; // the next N landed transactions stay invisible until svm_reveal
let priorityFees = [];

// setClock moves the Clock sysvar to slot and unixTime, and records the
// slot in SlotHashes, as a validator does: programs that check recent slots
// (the address lookup table program) see the harness's slots.
function setClock() {
  const c = svm.getClock();
  c.slot = slot;
  c.unixTimestamp = unixTime;
  svm.setClock(c);
  const current = svm.getSlotHashes();
  if (current.length > 0 && current[0].slot === slot) return;
  // SlotHash has no constructor: take a fresh instance from the SVM.
  const e = svm.getSlotHashes()[0] ?? null;
  if (!e) return;
  e.slot = slot;
  e.hash = blockhash;
  // Newest first and only older slots after it, as the programs'
  // binary search needs: LiteSVM starts with an entry for a slot far
  // ahead of the harness's, which would break the order.
  svm.setSlotHashes([e, ...current.filter((h) => h.slot < slot)].slice(0, 512));
}

class RPCError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

const ctx = () => ({ slot: Number(slot), apiVersion: "2.2.0" });

function encodeAccount(a) {
  if (!a || !a.exists) return null;
  return {
    lamports: Number(a.lamports),
    owner: a.programAddress,
    data: [Buffer.from(a.data).toString("base64"), "base64"],
    executable: a.executable,
    rentEpoch: 18446744073709551615,
    space: a.data.length,
  };
}

// tokenAccount decodes an SPL Token or Token-2022 account, or returns null.
function tokenAccount(addr) {
  const a = svm.getAccount(addr);
  if (!a.exists || (a.programAddress !== TOKEN && a.programAddress !== TOKEN22)) return null;
  const d = a.data;
  // 165 bytes is a token account; longer Token-2022 accounts carry the
  // account type (2 = account) at offset 165, mints carry 1 there.
  if (d.length < 165 || (d.length > 165 && d[165] !== 2)) return null;
  const mint = b58dec.decode(d.subarray(0, 32));
  const m = svm.getAccount(mint);
  const decimals = m.exists ? m.data[44] : 0;
  return {
    mint,
    owner: b58dec.decode(d.subarray(32, 64)),
    amount: Buffer.from(d.subarray(64, 72)).readBigUInt64LE(0),
    decimals,
    programId: a.programAddress,
  };
}

function tokenBalances(keys) {
  const out = [];
  keys.forEach((k, i) => {
    const t = tokenAccount(k);
    if (!t) return;
    const ui = Number(t.amount) / 10 ** t.decimals;
    out.push({
      accountIndex: i,
      mint: t.mint,
      owner: t.owner,
      programId: t.programId,
      uiTokenAmount: {
        amount: t.amount.toString(),
        decimals: t.decimals,
        uiAmount: ui,
        uiAmountString: String(ui),
      },
    });
  });
  return out;
}

// accountKeys lists the static keys then the keys loaded from lookup
// tables (writable, then read-only), the order a validator reports.
function accountKeys(msg) {
  const keys = [...msg.staticAccounts];
  const writable = [];
  const readonly = [];
  for (const l of msg.addressTableLookups ?? []) {
    const t = svm.getAccount(l.lookupTableAddress);
    if (!t.exists) throw new RPCError(-32602, `address lookup table ${l.lookupTableAddress} not found`);
    const at = (i) => b58dec.decode(t.data.subarray(56 + 32 * i, 56 + 32 * (i + 1)));
    for (const i of l.writableIndexes ?? l.writableIndices ?? []) writable.push(at(i));
    for (const i of l.readonlyIndexes ?? l.readonlyIndices ?? []) readonly.push(at(i));
  }
  return { keys: [...keys, ...writable, ...readonly], loaded: { writable, readonly } };
}

function fee(msg, keys, nsig) {
  let limit = 200000n * BigInt(msg.instructions.length);
  let price = 0n;
  for (const ix of msg.instructions) {
    if (keys[ix.programAddressIndex] !== COMPUTE_BUDGET || !ix.data) continue;
    const d = Buffer.from(ix.data);
    if (d[0] === 2) limit = BigInt(d.readUInt32LE(1));
    if (d[0] === 3) price = d.readBigUInt64LE(1);
  }
  return LAMPORTS_PER_SIGNATURE * BigInt(nsig) + (price * limit + 999999n) / 1000000n;
}

function decodeWire(b64, cfg) {
  const wire = cfg.encoding === "base58" ? Buffer.from(b58enc.encode(b64)) : Buffer.from(b64, "base64");
  try {
    return { wire, tx: txDecoder.decode(wire) };
  } catch (e) {
    throw new RPCError(-32602, `failed to deserialize transaction: ${e.message}`);
  }
}

// simulate runs tx on the current state without landing it, as a
// validator's simulateTransaction does (signatures checked, since the
// harness's SVM verifies them).
function simulate(b64, cfg = {}) {
  const { tx } = decodeWire(b64, cfg);
  const sim = svm.simulateTransaction(tx);
  const failed = typeof sim.err === "function";
  const meta = sim.meta();
  return {
    context: ctx(),
    value: {
      err: failed ? { InstructionError: String(sim.err()) } : null,
      logs: meta.logs(),
      accounts: null,
      unitsConsumed: Number(meta.computeUnitsConsumed()),
      returnData: null,
    },
  };
}

function send(b64, cfg = {}) {
  const { wire, tx } = decodeWire(b64, cfg);
  const sigs = Object.values(tx.signatures);
  if (!sigs[0]) throw new RPCError(-32602, "transaction is not signed");
  const signature = b58dec.decode(sigs[0]);
  if (records.has(signature)) {
    // A validator drops a duplicate; the first result stands.
    return signature;
  }
  const msg = msgDecoder.decode(tx.messageBytes);
  const { keys, loaded } = accountKeys(msg);
  if (!cfg.skipPreflight) {
    const sim = svm.simulateTransaction(tx);
    if (typeof sim.err === "function") {
      throw new RPCError(-32002, `Transaction simulation failed: ${String(sim.err())}`, {
        err: String(sim.err()),
        logs: sim.meta().logs(),
      });
    }
  }
  if (dropSends > 0) {
    // Accepted, then lost on the way to the leader: it never lands, and
    // once its blockhash expires it never can.
    dropSends--;
    return signature;
  }
  const preBalances = keys.map((k) => Number(svm.getBalance(k) ?? 0n));
  const preTokenBalances = tokenBalances(keys);
  const res = svm.sendTransaction(tx);
  const failed = typeof res.err === "function";
  let err = null;
  if (failed) {
    err = String(res.err());
    // Never landed: a validator would drop it without a trace.
    if (/BlockhashNotFound|AlreadyProcessed|SignatureFailure|AccountNotFound|InsufficientFundsForFee/i.test(err)) {
      throw new RPCError(-32002, `Transaction simulation failed: ${err}`, { err });
    }
  }
  const meta = failed ? res.meta() : res;
  slot += 1n;
  blockHeight += 1;
  setClock();
  records.set(signature, {
    // Every key the transaction names (loaded ones too), for
    // getSignaturesForAddress.
    named: new Set(keys),
    slot: Number(slot),
    blockTime: Number(unixTime),
    wire: wire.toString("base64"),
    version: msg.version === "legacy" ? "legacy" : msg.version,
    // When it counts as finalized (Date.now() ms; Infinity: held).
    finalizedAt: holdFinality ? Infinity : Date.now() + finalityMs,
    hidden: hideLanded > 0,
    meta: {
      err: err === null ? null : { InstructionError: err },
      status: err === null ? { Ok: null } : { Err: err },
      fee: Number(fee(msg, keys, sigs.length)),
      preBalances,
      postBalances: keys.map((k) => Number(svm.getBalance(k) ?? 0n)),
      preTokenBalances,
      postTokenBalances: tokenBalances(keys),
      logMessages: meta.logs(),
      innerInstructions: [],
      rewards: [],
      loadedAddresses: loaded,
      computeUnitsConsumed: Number(meta.computeUnitsConsumed()),
    },
  });
  if (hideLanded > 0) hideLanded--;
  setImmediate(notifySignatures);
  if (!holdFinality && finalityMs > 0) setTimeout(notifySignatures, finalityMs + 1);
  if (loseResponses > 0) {
    loseResponses--;
    throw new RPCError(-32000, "response lost (svm_loseResponses)");
  }
  return signature;
}

// setAccount writes an account as svm_setAccount is given it: pubkey,
// owner, base64 data, and optionally lamports (default: rent-exempt) and
// executable.
function setAccount(a) {
  const data = Buffer.from(a.data ?? "", "base64");
  svm.setAccount({
    address: a.pubkey,
    lamports: BigInt(a.lamports ?? svm.minimumBalanceForRentExemption(BigInt(data.length))),
    programAddress: a.owner,
    data: new Uint8Array(data),
    executable: !!a.executable,
    space: BigInt(data.length),
  });
}

function finalized(r) {
  return Date.now() >= r.finalizedAt;
}

function visible(sig, commitment) {
  const r = records.get(sig);
  if (!r || r.hidden) return null;
  if (commitment === "finalized" && !finalized(r)) return null;
  return r;
}

const methods = {
  getHealth: () => "ok",
  getVersion: () => ({ "solana-core": "litesvm-1.5.0", "feature-set": 0 }),
  getSlot: () => Number(slot),
  getBlockHeight: () => blockHeight,
  getLatestBlockhash: () => ({ context: ctx(), value: { blockhash, lastValidBlockHeight: blockhashValidUntil } }),
  isBlockhashValid: ([bh]) => ({ context: ctx(), value: bh === blockhash && blockHeight <= blockhashValidUntil }),
  getMinimumBalanceForRentExemption: ([len]) => Number(svm.minimumBalanceForRentExemption(BigInt(len))),
  getBalance: ([addr]) => ({ context: ctx(), value: Number(svm.getBalance(addr) ?? 0n) }),
  getAccountInfo: ([addr]) => ({ context: ctx(), value: encodeAccount(svm.getAccount(addr)) }),
  getMultipleAccounts: ([addrs]) => ({ context: ctx(), value: addrs.map((a) => encodeAccount(svm.getAccount(a))) }),
  getRecentPrioritizationFees: () => priorityFees.map((f, i) => ({ slot: Number(slot) - i, prioritizationFee: f })),
  getTokenAccountBalance: ([addr]) => {
    const t = tokenAccount(addr);
    if (!t) throw new RPCError(-32602, "Invalid param: not a Token account");
    const ui = Number(t.amount) / 10 ** t.decimals;
    return { context: ctx(), value: { amount: t.amount.toString(), decimals: t.decimals, uiAmount: ui, uiAmountString: String(ui) } };
  },
  getProgramAccounts: ([program, cfg = {}]) => {
    const filters = cfg.filters ?? [];
    const out = [];
    for (const a of svm.getProgramAccounts(program)) {
      const d = a.data;
      const ok = filters.every((f) => {
        if (f.dataSize !== undefined) return d.length === f.dataSize;
        if (f.memcmp) {
          const want = f.memcmp.encoding === "base64" ? Buffer.from(f.memcmp.bytes, "base64") : Buffer.from(b58enc.encode(f.memcmp.bytes));
          const off = f.memcmp.offset;
          return off + want.length <= d.length && Buffer.from(d.subarray(off, off + want.length)).equals(want);
        }
        throw new RPCError(-32602, `unsupported filter ${JSON.stringify(f)}`);
      });
      if (ok) out.push({ pubkey: a.address, account: encodeAccount({ ...a, exists: true }) });
    }
    return cfg.withContext ? { context: ctx(), value: out } : out;
  },
  sendTransaction: ([tx, cfg]) => send(tx, cfg),
  simulateTransaction: ([tx, cfg]) => simulate(tx, cfg),
  // A faucet, as a local validator's: the lamports arrive at once, under
  // a made-up signature that getSignatureStatuses reports finalized.
  requestAirdrop: ([addr, lamports]) => {
    const r = svm.airdrop(addr, BigInt(lamports));
    if (r && typeof r.err === "function") throw new RPCError(-32000, `airdrop failed: ${String(r.err())}`);
    const signature = b58dec.decode(crypto.getRandomValues(new Uint8Array(64)));
    slot += 1n;
    blockHeight += 1;
    setClock();
    airdrops.set(signature, Number(slot));
    setImmediate(notifySignatures);
    return signature;
  },
  getSignatureStatuses: ([sigs]) => ({
    context: ctx(),
    value: sigs.map((s) => {
      if (airdrops.has(s)) {
        return { slot: airdrops.get(s), confirmations: null, err: null, status: { Ok: null }, confirmationStatus: "finalized" };
      }
      const r = visible(s);
      if (!r) return null;
      return {
        slot: r.slot,
        confirmations: finalized(r) ? null : 1,
        err: r.meta.err,
        status: r.meta.status,
        confirmationStatus: finalized(r) ? "finalized" : "confirmed",
      };
    }),
  }),
  // Newest first, as a validator answers; before/until are signatures.
  getSignaturesForAddress: ([addr, cfg = {}]) => {
    const limit = Math.min(cfg.limit ?? 1000, 1000);
    const out = [];
    let started = !cfg.before;
    for (const [sig, r] of [...records.entries()].reverse()) {
      if (!started) {
        started = sig === cfg.before;
        continue;
      }
      if (sig === cfg.until) break;
      if (!r.named.has(addr) || !visible(sig, cfg.commitment ?? "finalized")) continue;
      out.push({ signature: sig, slot: r.slot, err: r.meta.err, memo: null, blockTime: r.blockTime,
        confirmationStatus: finalized(r) ? "finalized" : "confirmed" });
      if (out.length >= limit) break;
    }
    return out;
  },
  getTransaction: ([sig, cfg = {}]) => {
    const r = visible(sig, cfg.commitment ?? "finalized");
    if (!r) return null;
    if (r.version !== "legacy" && cfg.maxSupportedTransactionVersion === undefined) {
      throw new RPCError(-32015, "Transaction version (0) is not supported by the requesting client.");
    }
    return { slot: r.slot, blockTime: r.blockTime, transaction: [r.wire, "base64"], meta: r.meta, version: r.version };
  },

  // Test controls.
  svm_airdrop: ([addr, lamports]) => {
    const r = svm.airdrop(addr, BigInt(lamports));
    if (r && typeof r.err === "function") throw new RPCError(-32000, `airdrop failed: ${String(r.err())}`);
    return true;
  },
  svm_setAccount: ([a]) => { setAccount(a); return true; },
  svm_setAccounts: ([as]) => { for (const a of as) setAccount(a); return true; },
  svm_holdFinality: ([on]) => { holdFinality = !!on; return true; },
  svm_finalize: () => { for (const r of records.values()) r.finalizedAt = 0; setImmediate(notifySignatures); return true; },
  svm_setFinalityMs: ([ms]) => { finalityMs = Math.max(0, Number(ms) || 0); return true; },
  svm_dropSends: ([n]) => { dropSends = n; return true; },
  svm_loseResponses: ([n]) => { loseResponses = n; return true; },
  svm_hideLanded: ([n]) => { hideLanded = n; return true; },
  svm_reveal: () => { for (const r of records.values()) r.hidden = false; setImmediate(notifySignatures); return true; },
  svm_advanceBlocks: ([n]) => {
    blockHeight += n;
    slot += BigInt(n);
    setClock();
    if (blockHeight > blockhashValidUntil) {
      svm.expireBlockhash();
      blockhash = svm.latestBlockhash();
      blockhashValidUntil = blockHeight + BLOCKHASH_VALIDITY;
    }
    return blockHeight;
  },
  svm_setUnixTime: ([t]) => { unixTime = BigInt(t); setClock(); return true; },
  svm_setPrioritizationFees: ([fees]) => { priorityFees = fees; return true; },
  svm_transactionCount: () => records.size,
};

function handle(req) {
  const fn = methods[req.method];
  try {
    if (!fn) throw new RPCError(-32601, `Method not found: ${req.method}`);
    return { jsonrpc: "2.0", id: req.id, result: fn(req.params ?? []) };
  } catch (e) {
    const code = e instanceof RPCError ? e.code : -32603;
    return { jsonrpc: "2.0", id: req.id, error: { code, message: e.message, data: e.data } };
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      res.writeHead(400).end();
      return;
    }
    const out = Array.isArray(body) ? body.map(handle) : handle(body);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(out));
  });
});
// Subscriptions: signatureSubscribe notifies once, when the transaction
// reaches the commitment asked (a validator's behaviour), then ends.
// Other subscriptions are acknowledged and never notify.
let nextSubscription = 1;
const signatureSubs = new Map(); // id → {socket, signature, commitment}

function signatureReached(sig, commitment) {
  if (airdrops.has(sig)) return { slot: airdrops.get(sig), err: null };
  const r = visible(sig);
  if (!r) return null;
  if (commitment === "finalized" && !finalized(r)) return null;
  return { slot: r.slot, err: r.meta.err };
}

function notifySignatures() {
  for (const [id, sub] of signatureSubs) {
    const hit = signatureReached(sub.signature, sub.commitment);
    if (!hit) continue;
    signatureSubs.delete(id);
    if (sub.socket.readyState !== 1) continue;
    sub.socket.send(JSON.stringify({ jsonrpc: "2.0", method: "signatureNotification",
      params: { result: { context: { slot: hit.slot }, value: { err: hit.err } }, subscription: id } }));
  }
}

function serveWebSocket(wss) {
  wss.on("connection", (socket) => {
    socket.on("message", (data) => {
      let req;
      try {
        req = JSON.parse(String(data));
      } catch {
        return;
      }
      const reply = (result) => socket.send(JSON.stringify({ jsonrpc: "2.0", id: req.id, result }));
      const [first, cfg = {}] = req.params ?? [];
      if (req.method === "signatureSubscribe") {
        const id = nextSubscription++;
        signatureSubs.set(id, { socket, signature: first, commitment: cfg.commitment ?? "finalized" });
        reply(id);
        setImmediate(notifySignatures);
      } else if (req.method === "signatureUnsubscribe") {
        reply(signatureSubs.delete(first));
      } else if (/Subscribe$/.test(req.method ?? "")) {
        reply(nextSubscription++);
      } else if (/Unsubscribe$/.test(req.method ?? "")) {
        reply(true);
      } else {
        socket.send(JSON.stringify({ jsonrpc: "2.0", id: req.id, error: { code: -32601, message: `Method not found: ${req.method}` } }));
      }
    });
    socket.on("close", () => {
      for (const [id, sub] of signatureSubs) if (sub.socket === socket) signatureSubs.delete(id);
    });
    socket.on("error", () => {});
  });
}

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const devDir = flag("--dev");
const port = Number(flag("--port") ?? 0);
finalityMs = Math.max(0, Number(flag("--finality-ms") ?? 0) || 0);
const devAccounts = devDir ? await devSetup(devDir) : {};
server.listen(port, "127.0.0.1", () => {
  const httpPort = server.address().port;
  const wss = new WebSocketServer({ host: "127.0.0.1", port: port ? port + 1 : 0 }, () => {
    process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${httpPort}`, ws_url: `ws://127.0.0.1:${wss.address().port}`,
      ...devAccounts }) + "\n");
  });
  serveWebSocket(wss);
});

// devSetup makes the development chain's accounts (see the top of this
// file) and returns their addresses and key files.
async function devSetup(dir) {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const { Keypair, PublicKey } = await import("@solana/web3.js");
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const keypair = (name) => {
    const file = path.join(dir, name + ".json");
    if (fs.existsSync(file)) return { file, kp: Keypair.fromSecretKey(Uint8Array.from(JSON.parse(fs.readFileSync(file, "utf8")))) };
    const kp = Keypair.generate();
    fs.writeFileSync(file, JSON.stringify(Array.from(kp.secretKey)), { mode: 0o600 });
    return { file, kp };
  };
  const mint = keypair("usdc-mint");
  const authority = keypair("usdc-authority");
  const treasury = keypair("treasury");
  const feePayer = keypair("fee-payer");
  const wallet = keypair("dev-wallet");
  const ATA_PROGRAM = new PublicKey("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");
  const ata = (owner) =>
    PublicKey.findProgramAddressSync([owner.toBuffer(), new PublicKey(TOKEN).toBuffer(), mint.kp.publicKey.toBuffer()], ATA_PROGRAM)[0];
  const rent = (n) => svm.minimumBalanceForRentExemption(BigInt(n));
  const put = (address, owner, data, lamports = rent(data.length)) =>
    svm.setAccount({ address, lamports, programAddress: owner, data: new Uint8Array(data), executable: false, space: BigInt(data.length) });
  // SPL Token layouts: Mint (82 bytes) and Account (165 bytes).
  const supply = 1_000_000_000_000n;
  const m = Buffer.alloc(82);
  m.writeUInt32LE(1, 0);
  authority.kp.publicKey.toBuffer().copy(m, 4);
  m.writeBigUInt64LE(supply, 36);
  m[44] = 6;
  m[45] = 1;
  put(mint.kp.publicKey.toBase58(), TOKEN, m);
  const tokenAccount = (owner, amount) => {
    const a = Buffer.alloc(165);
    mint.kp.publicKey.toBuffer().copy(a, 0);
    owner.toBuffer().copy(a, 32);
    a.writeBigUInt64LE(amount, 64);
    a[108] = 1; // initialized
    put(ata(owner).toBase58(), TOKEN, a);
  };
  const devUSDC = 1_000_000_000n; // 1,000 USDC
  tokenAccount(treasury.kp.publicKey, 0n);
  tokenAccount(wallet.kp.publicKey, devUSDC);
  tokenAccount(authority.kp.publicKey, supply - devUSDC);
  for (const k of [authority, treasury, feePayer]) svm.airdrop(k.kp.publicKey.toBase58(), 10_000_000_000n);
  svm.airdrop(wallet.kp.publicKey.toBase58(), 100_000_000_000n);
  return {
    usdc_mint: mint.kp.publicKey.toBase58(),
    treasury: treasury.kp.publicKey.toBase58(),
    fee_payer: feePayer.kp.publicKey.toBase58(),
    fee_payer_key: feePayer.file,
    dev_wallet: wallet.kp.publicKey.toBase58(),
    dev_wallet_key: wallet.file,
  };
}
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
