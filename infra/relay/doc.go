// Package relay is the local stand-in for an API Gateway WebSocket API: one
// HTTP handler that accepts WebSocket connections, invokes a relay function
// with the same events API Gateway's Lambda proxy integration sends, and
// serves the @connections management API that the aws-sdk-go-v2
// apigatewaymanagementapi client talks to. The relay function and the code
// that posts to connections run unchanged here and in AWS.
//
// # Contract
//
// One port serves both sides:
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
//   - POST/GET/DELETE [/{stage}]/@connections/{connectionId} are
//     PostToConnection (the body is the message, sent as a text frame; a
//     body that is not UTF-8 goes as a binary frame to keep the stream valid),
//     GetConnection (connectedAt, identity.sourceIp, identity.userAgent,
//     lastActiveAt as ISO 8601) and DeleteConnection (204, then the
//     connection closes and $disconnect fires). Errors carry the
//     X-Amzn-ErrorType header and a {"message":…} body, so the SDK returns
//     *types.GoneException (410), *types.PayloadTooLargeException (413) or
//     *types.ForbiddenException (403). The optional stage prefix lets a
//     handler build the endpoint as in AWS, from DomainName and Stage.
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
// By default management requests are accepted signed or unsigned. With
// WithAccessKeyID they must carry a SigV4 Authorization header with that
// access key id, as AWS requires a signature; the signature itself is never
// verified. The local relay is meant to listen on loopback only, where every
// local process is trusted as much as the developer's own AWS profile.
//
// # Differences from AWS
//
// No authorizers, API keys, route selection expressions or stage variables:
// every message goes to $default. Header names reach the handler in Go's
// canonical form (AWS keeps the client's spelling), so handlers must look
// headers up case-insensitively, which they must in AWS anyway. Pings are
// answered but, as above, do not keep a connection alive.
package relay
