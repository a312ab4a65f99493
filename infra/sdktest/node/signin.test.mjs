// Sign-In With Solana from a wallet's side, with Solana's own JS libraries:
// a @solana/web3.js keypair, the Wallet Standard's message builder and
// verifier (@solana/wallet-standard-util, the reference solana:signIn
// implementation) and tweetnacl's ed25519, against the c0mpute gateway.
//
// Run by infra/devnet TestSignInFromJS, which starts a local network and
// passes C0MPUTE_API (its …/v1).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Keypair } from '@solana/web3.js';
import { createSignInMessageText, verifySignIn } from '@solana/wallet-standard-util';
import nacl from 'tweetnacl';
import bs58 from 'bs58';

const api = process.env.C0MPUTE_API;
if (!api) throw new Error('C0MPUTE_API is not set; run this through go test ./infra/devnet -run TestSignInFromJS');

async function post(path, body) {
  const res = await fetch(api + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

const b64 = (bytes) => Buffer.from(bytes).toString('base64');

// signIn does what a wallet's solana:signIn does with the server's input:
// fill in its address, build the message, sign it.
function signIn(kp, input) {
  const full = { ...input, address: kp.publicKey.toBase58() };
  const signedMessage = new TextEncoder().encode(createSignInMessageText(full));
  const signature = nacl.sign.detached(signedMessage, kp.secretKey);
  return { input: full, output: { account: { publicKey: kp.publicKey.toBytes(), address: kp.publicKey.toBase58() }, signedMessage, signature } };
}

test('a wallet signs in with solana:signIn and its key works', async () => {
  const kp = Keypair.generate();
  const ch = await post('/auth/siws/challenge', { wallet: kp.publicKey.toBase58() });
  assert.equal(ch.status, 200);
  assert.equal(ch.body.version, '1');
  const { input, output } = signIn(kp, ch.body);
  // The reference verifier accepts what the wallet made from our input.
  assert.ok(verifySignIn(input, output));
  const res = await post('/auth/siws/verify', {
    input,
    output: { account: { publicKey: b64(output.account.publicKey) }, signedMessage: b64(output.signedMessage), signature: b64(output.signature), signatureType: 'ed25519' },
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.account_id, kp.publicKey.toBase58());
  assert.equal(res.body.created, true);
  const bal = await fetch(api + '/balance', { headers: { authorization: 'Bearer ' + res.body.api_key } });
  assert.equal(bal.status, 200);
  assert.equal((await bal.json()).credits, 0);

  // The same signed message again is refused.
  const again = await post('/auth/siws/verify', {
    output: { account: { publicKey: b64(output.account.publicKey) }, signedMessage: b64(output.signedMessage), signature: b64(output.signature) },
  });
  assert.equal(again.status, 401);
  assert.equal(again.body.error.code, 'invalid_sign_in');
});

test('a wallet that signs text signs in with the plain form', async () => {
  const kp = Keypair.generate();
  const ch = await post('/auth/siws/challenge', {});
  const { output } = signIn(kp, ch.body);
  const res = await post('/auth/siws/verify', {
    wallet: kp.publicKey.toBase58(),
    message: new TextDecoder().decode(output.signedMessage),
    signature: bs58.encode(output.signature),
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.wallet, kp.publicKey.toBase58());
});

test('a message signed by another wallet, or for another site, is refused', async () => {
  const kp = Keypair.generate();
  const other = Keypair.generate();
  const ch = await post('/auth/siws/challenge', {});
  const { output } = signIn(kp, ch.body);
  const forged = await post('/auth/siws/verify', {
    output: { account: { publicKey: b64(other.publicKey.toBytes()) }, signedMessage: b64(output.signedMessage), signature: b64(nacl.sign.detached(output.signedMessage, other.secretKey)) },
  });
  assert.equal(forged.status, 401);
  const elsewhere = signIn(kp, { ...(await post('/auth/siws/challenge', {})).body, domain: 'evil.example' });
  const res = await post('/auth/siws/verify', {
    output: { account: { publicKey: b64(kp.publicKey.toBytes()) }, signedMessage: b64(elsewhere.output.signedMessage), signature: b64(elsewhere.output.signature) },
  });
  assert.equal(res.status, 401);
  assert.match(res.body.error.message, /domain/);
});
