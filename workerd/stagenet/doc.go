// Package stagenet is the stage transport of a sharded ring: direct,
// mutually authenticated, binary connections between ring members, over
// which a job's activations travel member to member. The relay carries
// only control; what crosses a stage connection is frames.
//
// # Authentication
//
// A member's identity is its ed25519 key (shard.PublicKey, its Solana
// address). Each side of a connection presents a self-signed X.509
// certificate made from that key, and TLS 1.3 makes each prove it holds
// the private half. There is no CA: a certificate is accepted when it is
// the only one presented, carries an Ed25519 key, is signed by that same
// key, and the key is the expected one — the dialled member's key for a
// client, a key the allow function accepts for a server. Certificate
// validity dates are not checked: the key is the identity, and members'
// clocks need not agree. Both sides require the ALPN protocol
// "c0mpute-stage/1", so a stage connection is never mistaken for another
// TLS service on the same port. Session resumption is off: every
// connection proves its keys afresh.
//
// In TLS 1.3 the client finishes its handshake before the server has
// checked the client's certificate, so a client the server refuses sees
// Dial succeed and its first Recv fail with the server's alert.
//
// # Frames
//
// Every frame has a fixed 52-byte header, then the job id, then the
// payload. Integers are little-endian, like the hidden-state wire form
// (engine.EncodeHidden) that most payloads are:
//
//	offset size field
//	0      4    magic "C0SF"
//	4      1    version (1)
//	5      1    kind (1..11, see Kind)
//	6      1    job id length (0..64)
//	7      1    reserved (0)
//	8      4    step u32
//	12     4    pos u32
//	16     4    payload length u32
//	20     32   SHA-256 of the payload
//	52     n    job id (printable ASCII)
//	52+n   m    payload
//
// The fixed header comes first so a reader learns every length, and
// refuses one over its limit, before it reads or allocates anything else.
// The hash covers the payload only; for a KindHidden frame it is the
// receipt hash engine.HashHidden of the hidden states, which both ends of
// a hop sign into their stage receipts. The header needs no hash of its
// own: TLS already protects it in transit.
//
// A decoder refuses (with an error wrapping ErrFrame) a bad magic, version
// or kind; a job id that is empty (except for ping and pong, whose id
// must be empty), longer than 64 bytes or not printable ASCII; a payload
// longer than the reader's limit, checked before anything is read; a
// hash that does not match; a truncate frame with a payload; a tokens
// payload that is not whole u32s; a ping or pong payload that is not an
// 8-byte nonce; an error payload over 1024 bytes or not UTF-8; and a
// bench or bench reply frame whose job id is not 64 lowercase hex digits
// (the model's manifest hash) or whose payload is empty or over
// MaxBenchPayload; and a verify payload whose draft count is missing,
// over MaxVerifyDrafts, or longer than the payload. The rest of a
// payload's content is the runtime's to check.
//
// Bench frames (KindBench, KindBenchReply) are how ring candidates time
// each other at probe: a candidate sends a peer one token's hidden state
// for the model's bench layer and gets the layer's output back, which it
// checks bit for bit against its own computation. They belong to no job;
// the job id field names the model instead.
// testdata/frame.golden pins the encoding of one frame of each kind.
//
// A reader allocates a payload as its bytes arrive, never the length the
// header announces: a first chunk of at most 64 KiB, then chunks of at
// most 1 MiB, joined once the last byte is in. A peer that announces a
// large payload and sends nothing more costs one chunk.
//
// # Connections
//
// A Conn reads in one goroutine of its own, which holds at most one
// decoded frame while the application is not in Recv; everything beyond
// that stays in the socket buffers, so a slow reader slows its sender
// (TCP back-pressure) instead of growing memory. That goroutine answers a
// ping with a pong and routes pongs to Ping, so Ping may be called while
// another goroutine is in Recv; neither ever sees ping or pong frames. A
// ping that arrives while a received frame waits for Recv is answered
// once Recv takes that frame.
//
// A Listener runs handshakes in goroutines of its own (at most 64 at a
// time, counting connections that wait for Accept), so a peer that
// connects and says nothing holds up no one and is dropped at the
// handshake timeout. Accept returns a *HandshakeError for each connection
// refused, and goes on accepting.
//
// Any key the allow function accepts can connect, so a Listener bounds
// what one can hold: at most WithMaxConnsPerPeer connections per key
// (default 4) and WithMaxConns in all (default 64), counted from the
// handshake until the connection closes; one over either limit is closed
// right after its handshake, and Accept reports it with a
// *HandshakeError wrapping ErrTooManyConns that names the key. A
// connection a Listener accepted is closed when its peer sends nothing —
// no frame, no ping, not a byte of a frame — for WithIdleTimeout (default
// 2 min) while this side is reading; its Recv then returns an error
// naming the timeout. Time this side spends not reading (a frame waiting
// for Recv) does not count. A dialled connection is never closed for
// silence: it pings when it has sent nothing for a quarter of its own
// idle timeout, so that with equal settings the listener keeps it.
//
// A peer that sends a malformed frame is cut off: the connection closes
// and Recv returns the error, which wraps ErrFrame. A Send that fails
// part-way (write timeout, cancelled context) also closes the connection,
// since the peer could not find the next frame boundary in what follows.
//
// Close closes the TCP connection without a TLS close_notify, which could
// block on a peer that stopped reading; the peer sees io.EOF at a frame
// boundary.
//
// Nothing is logged about a payload beyond its size: payloads hold a
// prompt's activations and tokens.
package stagenet
