package oaiwire

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Error types, as OpenAI names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeInsufficient   = "insufficient_quota"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
	TypeTimeout        = "timeout"
)

// Error is an API error in OpenAI's shape. Handlers return it; one writer
// turns it into a response (or a stream error event).
type Error struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
	// RetryAfter, in seconds, becomes a Retry-After header when set.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Message }

// body is the {"error": …} envelope.
type body struct {
	Error *Error `json:"error"`
}

// JSON returns the {"error":{…}} document.
func (e *Error) JSON() []byte {
	b, err := json.Marshal(body{Error: e})
	if err != nil { // cannot happen: only strings and ints
		return []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	return b
}

// InvalidRequest is a 400 naming the offending parameter ("" for none).
func InvalidRequest(param, msg string) *Error {
	e := &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_request", Message: msg}
	if param != "" {
		e.Param = &param
	}
	return e
}

// Standard errors of the API.
var (
	ErrInvalidKey = &Error{Status: http.StatusUnauthorized, Type: TypeAuthentication, Code: "invalid_api_key",
		Message: "Incorrect API key provided. Send Authorization: Bearer sk-c0mpute-…"}
	ErrInsufficientQuota = &Error{Status: http.StatusPaymentRequired, Type: TypeInsufficient, Code: "insufficient_quota",
		Message: "You exceeded your current quota: the account's credits cannot pay for this request. Deposit USDC to add credits."}
	ErrNoWorker = &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "no_worker_available",
		Message: "No worker is serving this model right now. The request was not charged; try again shortly."}
	ErrTimeout = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: "timeout",
		Message: "The worker did not answer in time. The request was not charged."}
	ErrWorkerLost = &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: "worker_lost",
		Message: "The worker serving this request disconnected. The request was not charged."}
	ErrInternal = &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error",
		Message: "The server had an error while processing your request. The request was not charged."}
)

// ModelNotFound is a 404 for an unknown model id.
func ModelNotFound(model string) *Error {
	p := "model"
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "model_not_found", Param: &p,
		Message: "The model " + strconv.Quote(model) + " does not exist. GET /v1/models lists the models offered."}
}

// RateLimited is a 429 with the seconds until the window resets.
func RateLimited(limit int64, retryAfter int) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", RetryAfter: retryAfter,
		Message: "Rate limit reached: " + strconv.FormatInt(limit, 10) + " requests per minute (per key, and for all of an account's keys together). Retry after " + strconv.Itoa(retryAfter) + "s."}
}

// WriteError writes err as an OpenAI error response. An error that is not
// an *Error is written as a 500 without its text, which may hold internals.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = ErrInternal
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON()) // the client is gone if this fails; nothing else to do
}
