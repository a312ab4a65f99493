// Package relay is the local stand-in for an API Gateway WebSocket API: an
// HTTP handler that accepts WebSocket connections and invokes a relay
// function with the same events API Gateway's Lambda proxy integration
// sends, and a second handler, Management, that serves the @connections
// management API the aws-sdk-go-v2 apigatewaymanagementapi client talks to.
// The relay function and the code that posts to connections run unchanged
// here and in AWS.
//
// # Contract
//
// The Relay itself (ServeHTTP) is the worker-facing endpoint. It serves
// WebSocket upgrades only; a request for an @connections path, well formed
// or not, signed or not, is answered 403 ForbiddenException
// {"message":"Forbidden"}, as API Gateway answers a route it does not
// have, and reaches no connection. Management is served on a listener of
// its own (the dev stack binds it to 127.0.0.1).
//
// On the worker-facing endpoint:
//
//   - A WebSocket upgrade on any path (workers dial ws://host:port/) gets a
//     fresh connection id (16 characters, API-Gateway-like, e.g.
//     "TWegAcC4EowCHnA=") and a $connect event. A handler error refuses the
//     upgrade with 500 (API Gateway answers an integration failure the same
//     way); a non-2xx status refuses it with that status, headers and body.
//     Only then does the connection exist. A zero status counts as 200, as
//     for a Lambda that returns no statusCode. A Sec-WebSocket-Protocol
//     header in the $connect response selects the subprotocol, as in AWS.
//   - Every data message is one $default event (EventType MESSAGE); a binary
//     message arrives base64-encoded with IsBase64Encoded set. The events of
//     one connection are handled one at a time, in arrival order. AWS gives
//     no such promise (it may invoke the function concurrently and out of
//     order), which is why the relay protocol (package relaymsg) numbers a
//     job's messages; code must not depend on the ordering seen here.
//   - A $default response with a non-empty body is sent back to the caller,
//     as API Gateway does for a route with a route response (two-way). A
//     handler error sends the caller API Gateway's
//     {"message":"Internal server error","connectionId":…,"requestId":…}.
//   - When a connection ends, for any reason and from either side, the
//     handler gets exactly one $disconnect event (EventType DISCONNECT, with
//     DisconnectStatusCode and DisconnectReason). The connection id is gone
//     before that event is sent: management calls on it answer 410
//     GoneException.
//
// On the management handler, every call is first authenticated as IAM
// authenticates API Gateway's callers (see Security); then
// POST/GET/DELETE [/{stage}]/@connections/{connectionId} are
// PostToConnection (the body is the message, sent as a text frame; a body
// that is not UTF-8 goes as a binary frame to keep the stream valid),
// GetConnection (connectedAt, identity.sourceIp, identity.userAgent,
// lastActiveAt as ISO 8601) and DeleteConnection (204, then the connection
// closes and $disconnect fires). Errors carry the X-Amzn-ErrorType header
// and a {"message":…} body, so the SDK returns *types.GoneException (410),
// *types.PayloadTooLargeException (413) or *types.ForbiddenException
// (403). The optional stage prefix lets a handler build the endpoint as in
// AWS, from the API's domain and stage.
//
// # Limits
//
// MaxMessage, IdleTimeout and MaxDuration are API Gateway's quotas; the
// options exist so tests can shorten them. Hitting one closes the connection
// as AWS does (1009 for a message over the limit, 1001 for idle and duration)
// and fires $disconnect. Only data messages from the client count as
// activity for the idle timeout, the conservative reading of AWS's rule, so
// a client that survives here survives there: workers must heartbeat.
//
// # Security
//
// The management API can post any message to any connection, read its
// address and end it, so it takes only what API Gateway takes from an
// IAM-authorised caller: a call signed with AWS Signature Version 4 by the
// one access key configured with WithCredentials. A call is refused with
// 403 ForbiddenException, and changes nothing, when it is unsigned
// ("Missing Authentication Token"), signed with another access key id or
// carries a session token ("The security token included in the request is
// invalid."), has an X-Amz-Date more than SignatureSkew (5 minutes, AWS's
// limit) from the relay's clock ("Signature expired: …" or "Signature not
// yet current: …"), a credential scope of another day or service than
// execute-api, or a signature that does not match ("The request signature
// we calculated does not match the signature you provided. …"). The
// signature is verified by recomputing it with aws-sdk-go-v2's own signer
// over a rebuilt request: the method, path (as escaped on the wire) and
// query received, only the headers named in SignedHeaders, Host, the
// Content-Length if signed, and the SHA-256 of the body read (at most
// MaxMessage), signed with the configured secret at the call's X-Amz-Date
// in the region and service of its credential scope, and compared with
// hmac.Equal. Any region is accepted, as the relay belongs to none. A body
// over MaxMessage cannot be verified without reading it all: once the key
// id and date have passed, it is answered 413 PayloadTooLargeException and
// changes nothing either. A relay without credentials refuses every
// management call: it fails closed.
//
// The management handler is meant for a loopback listener; only processes
// that hold the credentials (the dev stack makes fresh ones each run and
// gives them only to its own posters) can use it. The worker-facing
// endpoint needs no credentials, so the http.Server serving it should bound
// slow clients (ReadHeaderTimeout, ReadTimeout, IdleTimeout): the relay
// clears the deadlines those set on a connection it hijacks for a
// WebSocket, which then lives under the relay's own idle and duration
// limits.
//
// # In-process clients
//
// Code in the relay's own process may skip the sockets: Local serves the
// management calls the functions make (PostToConnection, DeleteConnection)
// by calling the relay directly, and Local.Connect opens a connection
// whose messages are handed over as function calls (LocalConn). Both keep
// the contract above — ids, events, ordering, limits, Gone — and differ
// only in what crosses no boundary: no HTTP, no SigV4 (only the holder of
// the *Relay can call them), no WebSocket frames. The dev stack uses them
// for its own API and relay function; workers, other processes and AWS use
// the WebSocket endpoint and the signed management API.
//
// # Differences from AWS
//
// No authorizers, API keys, route selection expressions or stage variables:
// every message goes to $default. The management API has its own listener
// (in AWS it shares the API's domain) and answers every authentication
// failure as ForbiddenException, the one 403 the management API's SDK
// models (AWS's codes for some, such as InvalidSignatureException, differ;
// the messages are AWS's). Header names reach the handler in Go's
// canonical form (AWS keeps the client's spelling), so handlers must look
// headers up case-insensitively, which they must in AWS anyway. Pings are
// answered but, as above, do not keep a connection alive.
package relay
