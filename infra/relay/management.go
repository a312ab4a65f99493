package relay

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// connectionsSegment precedes the connection id in a management path. The
// SDK sends POST/GET/DELETE {endpoint}/@connections/{ConnectionId}; in AWS
// the endpoint ends in the stage (https://{api}.execute-api.{region}.amazonaws.com/{stage}),
// so any prefix is accepted.
const connectionsSegment = "/@connections/"

// parseConnectionPath returns the connection id of a management path
// ("[/prefix]/@connections/{id}"; net/http has already unescaped it) and
// whether the path is one. The id is whatever follows the segment, up to an
// optional trailing slash; it may be malformed, which the caller answers.
func parseConnectionPath(p string) (string, bool) {
	i := strings.LastIndex(p, connectionsSegment)
	if i < 0 {
		return "", false
	}
	id := strings.TrimSuffix(p[i+len(connectionsSegment):], "/")
	if id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// validID reports whether id could be one this relay issued.
func validID(id string) bool {
	if len(id) != idLen || id[idLen-1] != '=' {
		return false
	}
	for i := range idLen - 1 {
		c := id[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// API Gateway management API error codes, as the SDK matches them.
const (
	errGone            = "GoneException"
	errPayloadTooLarge = "PayloadTooLargeException"
	errForbidden       = "ForbiddenException"
	errBadRequest      = "BadRequestException"
	errMethod          = "MethodNotAllowedException"
)

// connectionInfo is GetConnection's response body.
type connectionInfo struct {
	ConnectedAt  string       `json:"connectedAt"`
	Identity     identityInfo `json:"identity"`
	LastActiveAt string       `json:"lastActiveAt"`
}

type identityInfo struct {
	SourceIP  string `json:"sourceIp"`
	UserAgent string `json:"userAgent"`
}

// iso8601 is the timestamp format of GetConnection, UTC with milliseconds.
const iso8601 = "2006-01-02T15:04:05.000Z"

// isManagementPath reports whether any segment of p is "@connections":
// the worker-facing endpoint refuses every such path, well-formed or not.
func isManagementPath(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "@connections" {
			return true
		}
	}
	return false
}

// serveManagement is the management API: authentication first, as IAM
// runs before API Gateway looks at the route, then the call.
func (r *Relay) serveManagement(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("X-Amzn-RequestId", newID())
	body, ref := r.authenticate(req)
	if ref != nil {
		r.log.Debug("relay: management call refused", "method", req.Method, "path", req.URL.Path,
			"status", ref.status, "reason", ref.msg)
		writeError(w, ref.status, ref.code, ref.msg)
		return
	}
	id, ok := parseConnectionPath(req.URL.Path)
	if !ok {
		writeError(w, http.StatusForbidden, errForbidden, "Forbidden")
		return
	}
	switch req.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		w.Header().Set("Allow", "POST, GET, DELETE")
		writeError(w, http.StatusMethodNotAllowed, errMethod, "method not allowed on @connections")
		return
	}
	if !validID(id) {
		writeError(w, http.StatusBadRequest, errBadRequest, "Invalid connectionId: "+id)
		return
	}
	c := r.lookup(id)
	if c == nil {
		writeGone(w)
		return
	}
	switch req.Method {
	case http.MethodPost:
		r.post(w, c, body)
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(connectionInfo{
			ConnectedAt:  c.connectedAt.UTC().Format(iso8601),
			Identity:     identityInfo{SourceIP: c.sourceIP, UserAgent: c.userAgent},
			LastActiveAt: time.Unix(0, c.lastActive.Load()).UTC().Format(iso8601),
		})
	case http.MethodDelete:
		c.shut(closeCause{code: websocket.StatusNormalClosure, reason: "Connection deleted"})
		w.WriteHeader(http.StatusNoContent)
	}
}

// post is PostToConnection: the body, verbatim, as one message. authenticate
// has read it and checked its size.
func (r *Relay) post(w http.ResponseWriter, c *conn, data []byte) {
	if err := c.write(frameType(data), data); err != nil {
		// A failed or timed-out write leaves the socket closed; make sure
		// the connection ends (and $disconnect fires) now.
		c.shut(closeCause{code: websocket.StatusAbnormalClosure, reason: "Write failed"})
		r.log.Debug("relay: post failed", "conn", c.id, "err", err)
		writeGone(w)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func writeGone(w http.ResponseWriter) {
	writeError(w, http.StatusGone, errGone, "")
}

// writeError writes an error the way API Gateway does: the code in
// X-Amzn-ErrorType (which the SDK reads first) and a JSON body with the
// message (a null message, as AWS sends for GoneException, when empty).
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	var m *string
	if msg != "" {
		m = &msg
	}
	_ = json.NewEncoder(w).Encode(struct {
		Message *string `json:"message"`
	}{m})
}
