// Checks that @solana/web3.js's Connection works against server.mjs as it
// does against a validator: an airdrop confirmed, a transfer sent and
// confirmed with sendAndConfirmTransaction (which waits on a WebSocket
// signatureSubscribe). Run by TestWeb3Connection with C0MPUTE_RPC_URL and
// C0MPUTE_WS_URL (a harness on a free port has its WebSocket elsewhere than
// the port after; the dev chain's is there, where web3.js looks).
import { Connection, Keypair, SystemProgram, Transaction, sendAndConfirmTransaction, LAMPORTS_PER_SOL } from "@solana/web3.js";

const c = new Connection(process.env.C0MPUTE_RPC_URL, { commitment: "confirmed", wsEndpoint: process.env.C0MPUTE_WS_URL });
const payer = Keypair.generate();
const to = Keypair.generate().publicKey;
const sig = await c.requestAirdrop(payer.publicKey, LAMPORTS_PER_SOL);
await c.confirmTransaction({ signature: sig, ...(await c.getLatestBlockhash()) });
const tx = new Transaction().add(SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: to, lamports: 1_000_000 }));
await sendAndConfirmTransaction(c, tx, [payer]);
const got = await c.getBalance(to);
if (got !== 1_000_000) throw new Error(`balance ${got}, want 1000000`);
console.log(JSON.stringify({ ok: true }));
process.exit(0);
