// A wallet signs the staking transactions the gateway built for it, as a
// browser wallet's signTransaction does: @solana/web3.js deserializes each
// unsigned v0 transaction, checks it is the wallet's to pay and sign, and
// signs it with the wallet's keypair. Nothing is sent: the staking
// programs cannot run on the test chain. Driven by infra/devnet
// TestStakingThroughTheAPI, which checks the signatures and what was
// signed against @coral-xyz/anchor's encoding.
//
//   C0MPUTE_TXS         a JSON array of base64 unsigned transactions
//   C0MPUTE_WALLET_KEY  the wallet's keypair, a JSON array of 64 bytes
//   C0MPUTE_OUT         where to write [{signed, message}], base64
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { Keypair, VersionedTransaction } from "@solana/web3.js";

const { C0MPUTE_TXS: txs, C0MPUTE_WALLET_KEY: key, C0MPUTE_OUT: out } = process.env;
if (!txs || !key || !out) {
  throw new Error("run this through go test ./infra/devnet -run TestStakingThroughTheAPI");
}
const b64 = (bytes) => Buffer.from(bytes).toString("base64");

test("the wallet signs each staking transaction the gateway built", () => {
  const wallet = Keypair.fromSecretKey(Uint8Array.from(JSON.parse(key)));
  const signed = JSON.parse(txs).map((raw) => {
    const tx = VersionedTransaction.deserialize(Buffer.from(raw, "base64"));
    assert.equal(tx.version, 0, "a v0 transaction");
    assert.equal(tx.message.staticAccountKeys[0].toBase58(), wallet.publicKey.toBase58(), "the wallet pays the fee");
    assert.equal(tx.message.header.numRequiredSignatures, 1, "the wallet is the only signer");
    assert.ok(tx.signatures[0].every((b) => b === 0), "unsigned");
    tx.sign([wallet]);
    return { signed: b64(tx.serialize()), message: b64(tx.message.serialize()) };
  });
  writeFileSync(out, JSON.stringify(signed));
});
