// A user's path from a Solana wallet to a completion through a Solana Pay
// deposit, with the official client libraries, unchanged: the wallet signs
// in (Sign-In With Solana: a @solana/web3.js keypair, the Wallet Standard's
// message builder, tweetnacl's signature), asks for a deposit, pays the
// intent's Solana Pay transfer request as a wallet does (@solana/pay's
// parseURL and createTransfer, sent with @solana/kit), has it verified,
// chats with the official OpenAI SDK on the key from the sign-in and reads
// its ledger. Then the refusals, each with a clear error and nothing
// credited: a forged and a replayed sign-in, the same transfer verified
// twice, a transfer to another address, one without the intent's
// reference, one not finalized yet (then credited at finality).
//
// Driven by infra/devnet TestDepositFromJS, which runs the gateway on a
// local chain (LiteSVM), gives the wallet SOL and test USDC, and checks
// the chain and the store afterwards. The tests share the wallet and run
// in order.
//
//   C0MPUTE_API         the gateway's base URL (…/v1)
//   C0MPUTE_RPC_URL     the chain's JSON-RPC endpoint (also takes the
//                       harness's svm_* test controls)
//   C0MPUTE_WALLET_KEY  the user's keypair, a JSON array of 64 bytes; it
//                       holds SOL and test USDC
//   C0MPUTE_ELSEWHERE   a wallet that is not the treasury, with a USDC
//                       account
//   C0MPUTE_MODEL       a model the network serves
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Keypair } from "@solana/web3.js";
import { createSignInMessageText } from "@solana/wallet-standard-util";
import nacl from "tweetnacl";
import {
  address,
  appendTransactionMessageInstructions,
  createKeyPairSignerFromBytes,
  createSolanaRpc,
  createTransactionMessage,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
} from "@solana/kit";
import { createTransfer, parseURL } from "@solana/pay";

const api = process.env.C0MPUTE_API;
const rpcUrl = process.env.C0MPUTE_RPC_URL;
const model = process.env.C0MPUTE_MODEL;
if (!api || !rpcUrl || !model || !process.env.C0MPUTE_WALLET_KEY || !process.env.C0MPUTE_ELSEWHERE) {
  throw new Error("run this through go test ./infra/devnet -run TestDepositFromJS");
}
const secret = Uint8Array.from(JSON.parse(process.env.C0MPUTE_WALLET_KEY));
const elsewhere = address(process.env.C0MPUTE_ELSEWHERE);
const keypair = Keypair.fromSecretKey(secret);
const wallet = keypair.publicKey.toBase58();
const rpc = createSolanaRpc(rpcUrl);

const b64 = (bytes) => Buffer.from(bytes).toString("base64");

async function call(method, path, { key, body } = {}) {
  const headers = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  const res = await fetch(api + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

// svm calls one of the local chain's test controls (svm_holdFinality,
// svm_finalize): a real cluster finalizes on its own ~15 s after landing.
async function svm(method, ...params) {
  const res = await fetch(rpcUrl, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  const out = await res.json();
  assert.equal(out.error, undefined, `${method}: ${JSON.stringify(out.error)}`);
}

// signIn does what a wallet's solana:signIn does with the server's input:
// fill in its address, build the standard message, sign it; the body is
// its output as the verify route takes it.
function signIn(input, signer = keypair) {
  const full = { ...input, address: wallet };
  const msg = new TextEncoder().encode(createSignInMessageText(full));
  const sig = nacl.sign.detached(msg, signer.secretKey);
  return {
    input: full,
    output: { account: { publicKey: b64(keypair.publicKey.toBytes()), address: wallet }, signedMessage: b64(msg), signature: b64(sig), signatureType: "ed25519" },
  };
}

// pay is the wallet's side of a Solana Pay transfer request: the official
// library's instructions (memo, then TransferChecked carrying the
// references), signed by the user and sent; it returns the signature once
// the chain has it.
async function pay(fields) {
  const signer = await createKeyPairSignerFromBytes(secret);
  const instructions = await createTransfer(rpc, signer, fields);
  const { value: blockhash } = await rpc.getLatestBlockhash().send();
  const tx = await signTransactionMessageWithSigners(
    pipe(
      createTransactionMessage({ version: 0 }),
      (m) => setTransactionMessageFeePayerSigner(signer, m),
      (m) => setTransactionMessageLifetimeUsingBlockhash(blockhash, m),
      (m) => appendTransactionMessageInstructions(instructions, m),
    ),
  );
  const signature = getSignatureFromTransaction(tx);
  const sent = await rpc.sendTransaction(getBase64EncodedWireTransaction(tx), { encoding: "base64" }).send();
  assert.equal(sent, signature);
  for (let i = 0; i < 100; i++) {
    const { value: [status] } = await rpc.getSignatureStatuses([signature]).send();
    if (status) {
      assert.equal(status.err, null, `transfer ${signature} failed: ${JSON.stringify(status.err)}`);
      return signature;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`transfer ${signature} never landed`);
}

let apiKey; // from the sign-in
const deposit = (body) => call("POST", "/deposits", { key: apiKey, body });
const verify = (id, signature) => call("POST", `/deposits/${id}/verify`, { key: apiKey, body: { signature } });
const credits = async () => (await call("GET", "/balance", { key: apiKey })).body.credits;
const paid = []; // the signatures that were credited, oldest first

// refused checks a verify's answer: a 400 on the signature that says why
// and that nothing was credited.
function refused(t, res, why) {
  assert.equal(res.status, 400, JSON.stringify(res.body));
  assert.equal(res.body.error.code, "invalid_request");
  assert.equal(res.body.error.param, "signature");
  assert.match(res.body.error.message, why);
  assert.match(res.body.error.message, /Nothing was credited/);
  t.diagnostic(`${res.status} ${res.body.error.code}: ${res.body.error.message}`);
}

test("a forged sign-in is refused, the wallet's own signs in, and its replay is refused", async (t) => {
  const ch = await call("POST", "/auth/siws/challenge", { body: { wallet } });
  assert.equal(ch.status, 200, JSON.stringify(ch.body));

  // The wallet's message, signed by another key.
  const forged = await call("POST", "/auth/siws/verify", { body: signIn(ch.body, Keypair.generate()) });
  assert.equal(forged.status, 401, JSON.stringify(forged.body));
  assert.equal(forged.body.error.code, "invalid_sign_in");
  assert.match(forged.body.error.message, /signature does not verify/);
  assert.equal(forged.body.api_key, undefined);
  t.diagnostic(`forged: ${forged.status} ${forged.body.error.message}`);

  // The refused forgery spent nothing: the same challenge signs in.
  const signed = signIn(ch.body);
  const res = await call("POST", "/auth/siws/verify", { body: signed });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.account_id, wallet);
  assert.equal(res.body.wallet, wallet);
  assert.equal(res.body.created, true, "the forgery made no account");
  assert.match(res.body.api_key, /^sk-/);
  apiKey = res.body.api_key;

  // The same signed message again.
  const replay = await call("POST", "/auth/siws/verify", { body: signed });
  assert.equal(replay.status, 401, JSON.stringify(replay.body));
  assert.equal(replay.body.error.code, "invalid_sign_in");
  assert.match(replay.body.error.message, /used already/);
  assert.equal(replay.body.api_key, undefined);
  t.diagnostic(`replayed: ${replay.status} ${replay.body.error.message}`);
  assert.equal(await credits(), 0);
});

test("the wallet pays a deposit's Solana Pay request with @solana/pay; it is credited once", async (t) => {
  const d = await deposit({ amount_usdc: "2.5" });
  assert.equal(d.status, 201, JSON.stringify(d.body));
  assert.equal(d.body.state, "pending");
  // The transfer request, as a wallet reads it.
  const req = parseURL(d.body.solana_pay_url);
  assert.equal(req.recipient, d.body.recipient);
  assert.equal(req.splToken, d.body.mint);
  assert.deepEqual(req.reference, [d.body.reference]);
  assert.equal(req.memo, d.body.id);
  assert.equal(req.amount, 2.5);
  assert.equal(req.label, "c0mpute");

  const signature = await pay(req);
  const res = await verify(d.body.id, signature);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.state, "credited");
  assert.equal(res.body.credited_now, 250);
  assert.equal(res.body.credits, 250);
  assert.equal(res.body.credited_usdc, "2.5");
  assert.deepEqual(res.body.signatures, [signature]);
  paid.push(signature);

  // The same transfer verified again: answered, credited nothing more.
  const again = await verify(d.body.id, signature);
  assert.equal(again.status, 200, JSON.stringify(again.body));
  assert.equal(again.body.credited_now, 0);
  assert.equal(again.body.credits, 250);
  t.diagnostic(`verified twice: ${again.status}, credited_now ${res.body.credited_now} then ${again.body.credited_now}`);
  assert.equal(await credits(), 250);
});

test("a transfer to another address, or without the intent's reference, credits nothing", async (t) => {
  const d = await deposit({ amount_usdc: "1" });
  assert.equal(d.status, 201, JSON.stringify(d.body));
  const req = parseURL(d.body.solana_pay_url);

  // Everything the request asks, paid to another wallet's USDC account.
  const wrongDst = await pay({ ...req, recipient: elsewhere });
  refused(t, await verify(d.body.id, wrongDst), /not sent to the treasury/);

  // Paid to the treasury, with the memo, but not the reference.
  const noRef = await pay({ ...req, reference: undefined });
  refused(t, await verify(d.body.id, noRef), /does not carry this deposit's reference/);

  assert.equal(await credits(), 250);
  const list = await call("GET", "/deposits", { key: apiKey });
  const open = list.body.data.find((x) => x.id === d.body.id);
  assert.equal(open.state, "pending");
  assert.deepEqual(open.signatures, []);
});

test("a transfer not finalized yet is answered 409 not_finalized, then credited at finality", async (t) => {
  const d = await deposit({ amount_usdc: "1.5" });
  assert.equal(d.status, 201, JSON.stringify(d.body));
  await svm("svm_holdFinality", true);
  let signature;
  try {
    signature = await pay(parseURL(d.body.solana_pay_url));
    const early = await verify(d.body.id, signature);
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, "not_finalized");
    assert.match(early.body.error.message, /not finalized yet.*retry shortly.*Nothing was credited/s);
    t.diagnostic(`before finality: ${early.status} ${early.body.error.code}: ${early.body.error.message}`);
    assert.equal(await credits(), 250);
  } finally {
    await svm("svm_finalize");
    await svm("svm_holdFinality", false);
  }
  const res = await verify(d.body.id, signature);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.state, "credited");
  assert.equal(res.body.credited_now, 150);
  assert.equal(res.body.credited_usdc, "1.5");
  paid.push(signature);
  assert.equal(await credits(), 400);
  t.diagnostic(`after finality: ${res.status} credited_now ${res.body.credited_now}`);
});

test("the key from the sign-in chats through the OpenAI SDK, and the ledger shows what was paid", async (t) => {
  const openai = new OpenAI({ baseURL: api, apiKey, maxRetries: 0 });
  const completion = await openai.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hello." }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.ok(completion.choices[0].message.content.length > 0);

  const balance = (await call("GET", "/balance", { key: apiKey })).body;
  assert.equal(balance.total_deposited, 400);
  assert.ok(balance.credits < 400 && balance.credits > 0, JSON.stringify(balance));
  assert.equal(balance.total_spent, 400 - balance.credits);

  const ledger = await call("GET", "/transactions", { key: apiKey });
  assert.equal(ledger.status, 200, JSON.stringify(ledger.body));
  const deposits = ledger.body.data.filter((t) => t.type === "deposit");
  // Newest first: the finalized-late deposit, then the first.
  assert.deepEqual(deposits.map((t) => [t.signature, t.credits]), [[paid[1], 150], [paid[0], 250]]);
  const charges = ledger.body.data.filter((t) => t.type === "charge");
  assert.equal(charges.length, 1, JSON.stringify(ledger.body.data));
  assert.equal(charges[0].credits, balance.credits - 400);
  t.diagnostic(`balance ${JSON.stringify(balance)}; ledger ${JSON.stringify(ledger.body.data.map((x) => [x.type, x.credits]))}`);
});
