// An agent that holds only a Solana keypair and USDC (no SOL, no account,
// no key) goes from nothing to a served chat completion with the official
// x402 client (@x402/fetch + @x402/svm, unchanged) and the official OpenAI
// SDK. Driven by infra/devnet TestX402TopUp, which runs the gateway on a
// local chain and checks the chain and the ledger afterwards.
//
//   C0MPUTE_API        the gateway's base URL (…/v1)
//   C0MPUTE_RPC_URL    the chain's JSON-RPC endpoint
//   C0MPUTE_AGENT_KEY  the agent's keypair, a JSON array of 64 bytes
//   C0MPUTE_MODEL      a model the network serves
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactSvmScheme } from "@x402/svm/exact/client";

const api = process.env.C0MPUTE_API;
const rpcUrl = process.env.C0MPUTE_RPC_URL;
const model = process.env.C0MPUTE_MODEL;
const secret = Uint8Array.from(JSON.parse(process.env.C0MPUTE_AGENT_KEY));
const topUp = `${api}/x402/top-up?amount=2.5`;

const decode = (h) => JSON.parse(Buffer.from(h, "base64").toString("utf8"));

// payingClient is the official client for the agent's keypair. The local
// chain's USDC is a test mint, not one of the client's default assets, so
// the agent allows it by name, with a per-payment cap, as the client asks
// for any token it does not know (mainnet USDC needs no entry, and is
// capped at $1 a payment unless the agent raises it).
async function payingClient() {
  const res = await fetch(`${api}/x402/top-up?amount=1`, { method: "POST" });
  const [offer] = decode(res.headers.get("payment-required")).accepts;
  const signer = await createKeyPairSignerFromBytes(secret);
  const client = new x402Client().register("solana:*", new ExactSvmScheme(signer, { rpcUrl }));
  client.setSpendControls({ allowedAssets: [{ network: offer.network, asset: offer.asset, maxAmountPerPayment: "5000000" }] });
  return { client, signer };
}

test("without a payment the top-up answers 402 with x402 v2 requirements", async () => {
  const res = await fetch(topUp, { method: "POST" });
  assert.equal(res.status, 402);
  const required = decode(res.headers.get("payment-required"));
  assert.equal(required.x402Version, 2);
  assert.equal(required.accepts.length, 1);
  const [offer] = required.accepts;
  assert.equal(offer.scheme, "exact");
  assert.equal(offer.network, "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1");
  assert.equal(offer.amount, "2500000");
  assert.ok(offer.extra.feePayer, "the offer names our fee payer");
});

test("the official client pays, the wallet's account is credited and a completion is served", async () => {
  const { client, signer } = await payingClient();
  // Keep the payment header the client sends, to replay it below.
  let paid;
  const recording = async (input, init) => {
    const req = new Request(input, init);
    if (req.headers.get("payment-signature")) paid = req.headers.get("payment-signature");
    return fetch(req);
  };
  const pay = wrapFetchWithPayment(recording, client);
  const res = await pay(topUp, { method: "POST" });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  const settled = decodePaymentResponseHeader(res.headers.get("payment-response"));
  assert.equal(settled.success, true);
  assert.equal(settled.payer, signer.address);
  assert.equal(body.account_id, signer.address);
  assert.equal(body.state, "credited");
  assert.equal(body.credited_now, 250);
  assert.equal(body.transaction, settled.transaction);
  assert.match(body.api_key, /^sk-/);

  const openai = new OpenAI({ baseURL: api, apiKey: body.api_key, maxRetries: 0 });
  const completion = await openai.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hello." }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.ok(completion.choices[0].message.content.length > 0);

  // The same payment again: answered as settled, credited nothing more,
  // and no new key for a caller that shows its own.
  const again = await fetch(topUp, {
    method: "POST",
    headers: { "payment-signature": paid, authorization: `Bearer ${body.api_key}` },
  });
  const replay = await again.json();
  assert.equal(again.status, 200, JSON.stringify(replay));
  assert.equal(replay.credited_now, 0);
  assert.equal(replay.transaction, body.transaction);
  assert.equal(replay.api_key, undefined);

  const balance = await (await fetch(`${api}/balance`, { headers: { authorization: `Bearer ${body.api_key}` } })).json();
  process.stdout.write(`# balance ${JSON.stringify(balance)}\n`);
});

test("a payment for another amount is refused with 402 and a reason", async () => {
  const { client } = await payingClient();
  // The client pays what the 402 for 1 USDC asks, and sends it to the
  // top-up of 3 USDC: the server holds the payment to its own offer.
  const res = await fetch(`${api}/x402/top-up?amount=1`, { method: "POST" });
  const required = decode(res.headers.get("payment-required"));
  const payload = await client.createPaymentPayload(required);
  const header = Buffer.from(JSON.stringify(payload)).toString("base64");
  const refused = await fetch(`${api}/x402/top-up?amount=3`, { method: "POST", headers: { "payment-signature": header } });
  assert.equal(refused.status, 402);
  const reason = decode(refused.headers.get("payment-required")).error;
  assert.match(reason, /another offer/);
  const settled = decodePaymentResponseHeader(refused.headers.get("payment-response"));
  assert.equal(settled.success, false);
});
