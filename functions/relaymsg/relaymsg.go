// Package relaymsg is the wire protocol on the relay: the JSON messages that
// workerd, the relay function and API listeners exchange over API Gateway
// WebSocket connections (or the local relay with the same contract).
//
// Every message is one JSON object with a protocol version "v" and a
// "type". Decode validates it completely; a message that fails gets an error
// message back, never a crash.
package relaymsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/go-playground/validator/v10"
)

// Version is the protocol version this code speaks.
const Version = 1

// MaxMessage is API Gateway WebSocket's message size limit; nothing larger
// may be sent, so senders split (chunks) or refuse (jobs) above it.
const MaxMessage = 128 * 1024

// Message types.
const (
	// worker → relay
	TypeRegister  = "register"
	TypeHeartbeat = "heartbeat"
	TypeDrain     = "drain"
	// worker → listener, through the relay, which adds From
	TypeChunk = "chunk"
	TypeDone  = "done"
	TypeFail  = "fail"
	// relay → worker
	TypeRegistered = "registered"
	TypeJob        = "job"
	TypeCancel     = "cancel"
	TypeError      = "error"
	// relay → listener
	TypeAssign = "assign"
	TypeLost   = "lost"
	// listener → relay, answered by welcome: API Gateway tells a
	// connection nothing about itself, so a listener asks for its id.
	TypeHello   = "hello"
	TypeWelcome = "welcome"
)

// Header is the part every message has.
type Header struct {
	V    int    `json:"v" validate:"eq=1"`
	Type string `json:"type" validate:"required"`
}

// Register announces the models a worker serves. It is the first message a
// worker sends on a new connection.
type Register struct {
	Header
	Models []string `json:"models" validate:"max=64,dive,required,max=128"`
	// Agent is the worker software and version, for operators.
	Agent string `json:"agent,omitempty" validate:"max=128"`
	// Caps says what the worker's backend supports for each model; a
	// model without an entry is served as plain chat only (no vision,
	// tools or response_format), so dispatch sends it nothing else.
	Caps []ModelCaps `json:"caps,omitempty" validate:"max=64,dive"`
	// Ring offers the worker as a ring member (workerd --shard) for every
	// ring model the gateway serves (Registered.Ring lists them). A worker
	// must register at least one model or offer itself as a ring member.
	Ring bool `json:"ring,omitempty"`
}

// ModelCaps is what a worker's backend supports for one model.
type ModelCaps struct {
	Model          string `json:"model" validate:"required,max=128"`
	Vision         bool   `json:"vision,omitempty"`
	Tools          bool   `json:"tools,omitempty"`
	ResponseFormat bool   `json:"response_format,omitempty"`
	// Context is the context length in tokens the worker runs the model
	// with; 0 if it does not know.
	Context int64 `json:"context,omitempty" validate:"min=0,max=16777216"`
	// Image says the model renders images (it is sent ImageJobs, and
	// no chat).
	Image bool `json:"image,omitempty"`
}

// Heartbeat keeps a connection inside API Gateway's idle timeout.
type Heartbeat struct {
	Header
}

// Drain tells the relay to send this connection no new job.
type Drain struct {
	Header
}

// Chunk carries a batch of deltas of one job's reply, or one part of an
// image job's image: exactly one of Deltas and Image is set.
type Chunk struct {
	Header
	Job string `json:"job" validate:"required,max=64"`
	// To is the listener connection the job came from.
	To string `json:"to" validate:"required,max=128"`
	// From is the sending worker's connection, set by the relay (never
	// trusted from the sender).
	From string `json:"from,omitempty"`
	// Seq orders a job's chunk, done and fail messages from 0: API Gateway
	// may deliver them out of order.
	Seq    int64           `json:"seq" validate:"min=0"`
	Deltas []oaiwire.Delta `json:"deltas,omitempty" validate:"max=4096"`
	// Image is a part of an image job's reply (see ImageJob); Seq is its
	// index.
	Image *ImagePart `json:"image,omitempty"`
	// Ticket is the job's ticket, copied from the Job message.
	Ticket string `json:"ticket" validate:"required,len=43"`
}

// Done ends a job's reply.
type Done struct {
	Header
	Job          string `json:"job" validate:"required,max=64"`
	To           string `json:"to" validate:"required,max=128"`
	From         string `json:"from,omitempty"`
	Seq          int64  `json:"seq" validate:"min=0"`
	FinishReason string `json:"finish_reason" validate:"required,oneof=stop length tool_calls content_filter"`
	// Usage is the worker's claim: the gateway bounds it by what it
	// relayed before it counts anywhere.
	Usage  oaiwire.Usage `json:"usage"`
	Ticket string        `json:"ticket" validate:"required,len=43"`
	// Receipt is the worker's signed receipt of the job (see Receipt):
	// the gateway pays for nothing without a valid one.
	Receipt *Receipt `json:"receipt" validate:"required"`
	// Ring is the stages' settlement of a ring job (see RingDone); the
	// gateway pays a ring job only with one that verifies.
	Ring *RingDone `json:"ring,omitempty"`
}

// FailModelNotServed is the Fail code of a worker handed a model it does
// not serve (any more): the gateway moves the job and cuts the worker off.
const FailModelNotServed = "model_not_served"

// Sender returns who sent a worker's chunk, done or fail (From, set by the
// relay) and its place in the job's sequence; ok is false for any other
// message.
func Sender(m any) (from string, seq int64, ok bool) {
	switch m := m.(type) {
	case *Chunk:
		return m.From, m.Seq, true
	case *Done:
		return m.From, m.Seq, true
	case *Fail:
		return m.From, m.Seq, true
	}
	return "", 0, false
}

// Fail ends a job with an error on the worker's side.
type Fail struct {
	Header
	Job  string `json:"job" validate:"required,max=64"`
	To   string `json:"to" validate:"required,max=128"`
	From string `json:"from,omitempty"`
	Seq  int64  `json:"seq" validate:"min=0"`
	// Code is a short machine-readable reason; Message is for operators
	// and never holds prompt or completion text.
	Code    string `json:"code" validate:"required,max=64"`
	Message string `json:"message,omitempty" validate:"max=1024"`
	Ticket  string `json:"ticket" validate:"required,len=43"`
}

// Registered confirms a registration.
type Registered struct {
	Header
	Conn   string   `json:"conn" validate:"required"`
	Models []string `json:"models"`
	// Ignored lists registered models the gateway does not offer.
	Ignored []string `json:"ignored,omitempty"`
	// BatchMillis is how long the worker may gather deltas into one
	// chunk after the first. The relay decides: in AWS every message is a
	// paid invocation, on one machine a message costs microseconds.
	BatchMillis int `json:"batch_ms" validate:"min=0,max=1000"`
	// Ring lists the registered models the gateway serves as rings (see
	// ring.go): the worker does not serve them whole, and may announce
	// itself as a member of their rings.
	Ring []RingOffer `json:"ring,omitempty" validate:"max=16,dive"`
}

// Job hands a worker a request. It is the only place the prompt travels,
// and it travels in memory only.
type Job struct {
	Header
	Job string `json:"job" validate:"required,max=64"`
	// ReplyTo is the listener connection to address chunks to.
	ReplyTo string `json:"reply_to" validate:"required,max=128"`
	Model   string `json:"model" validate:"required,max=128"`
	// Request is checked by oaiwire.Validate, whose validator knows
	// oaiwire's custom tags; this package's validator must skip it (it
	// would panic on the unknown "toolname" tag of a request with tools).
	Request oaiwire.ChatRequest `json:"request" validate:"-"`
	// Deadline is when the gateway stops waiting: a worker ends the reply
	// before it (finish_reason "length"), so a long generation is
	// delivered whole and charged rather than cut.
	Deadline time.Time `json:"deadline"`
	// BudgetMillis is the time left until Deadline when the job was sent:
	// a worker times its reply by its own clock from when the job
	// arrived, which no clock skew between it and the gateway can upset.
	BudgetMillis int64 `json:"budget_ms" validate:"min=0"`
	// Ticket authorises the worker's messages for this job (see Ticketer);
	// the worker copies it into each of them.
	Ticket string `json:"ticket" validate:"required,len=43"`
	// Ring is set for a job of a ring model (see RingJob).
	Ring *RingJob `json:"ring,omitempty"`
}

// Cancel tells a worker to stop a job (the client went away).
type Cancel struct {
	Header
	Job string `json:"job" validate:"required,max=64"`
}

// Error reports a message the relay could not accept.
type Error struct {
	Header
	Code    string `json:"code" validate:"required"`
	Message string `json:"message"`
}

// Assign tells a listener which worker took its queued job.
type Assign struct {
	Header
	Job    string `json:"job" validate:"required,max=64"`
	Worker string `json:"worker" validate:"required,max=128"`
}

// Lost tells a listener that the worker of its job disconnected.
type Lost struct {
	Header
	Job    string `json:"job" validate:"required,max=64"`
	Worker string `json:"worker" validate:"required,max=128"`
}

// Hello asks the relay for the sender's connection id.
type Hello struct {
	Header
}

// Welcome answers Hello.
type Welcome struct {
	Header
	Conn string `json:"conn" validate:"required"`
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// ErrTooLarge means a message exceeds MaxMessage.
var ErrTooLarge = errors.New("relaymsg: message larger than 128 KiB")

// Decode parses and validates one message. The result is a pointer to one
// of the message structs of this package.
func Decode(b []byte) (any, error) {
	if len(b) > MaxMessage {
		return nil, ErrTooLarge
	}
	if m, ok := decodeFast(b); ok {
		return m, nil
	}
	return decodeGeneral(b)
}

// decodeGeneral is Decode for any input within MaxMessage: the header,
// then the message it names.
func decodeGeneral(b []byte) (any, error) {
	var h Header
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("relaymsg: not a JSON object with v and type: %w", err)
	}
	if h.V != Version {
		return nil, fmt.Errorf("relaymsg: unsupported protocol version %d (want %d)", h.V, Version)
	}
	newMsg, ok := constructors[h.Type]
	if !ok {
		return nil, fmt.Errorf("relaymsg: unknown message type %q", h.Type)
	}
	m := newMsg()
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("relaymsg: %s: %w", h.Type, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("relaymsg: %s: trailing data after the message", h.Type)
	}
	if err := check(m, h.Type); err != nil {
		return nil, err
	}
	return m, nil
}

// encodedPrefix is how every message Encode writes begins: its header,
// version first, then the type.
var encodedPrefix = []byte(`{"v":` + strconv.Itoa(Version) + `,"type":"`)

// decodeFast decodes a message that begins as Encode writes it in one
// parse, where Decode's general path parses the header first and then the
// message. It reports false for anything it does not decode and accept
// exactly as that path would — another shape, a syntax error, a header
// that a later duplicate key changes, a message the checks refuse — so
// Decode's own path gives the answer, and its error, for those.
func decodeFast(b []byte) (any, bool) {
	rest, ok := bytes.CutPrefix(b, encodedPrefix)
	if !ok {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	typ := string(rest[:end])
	newMsg, ok := constructors[typ]
	if !ok {
		return nil, false
	}
	m := newMsg()
	if err := json.Unmarshal(b, m); err != nil {
		return nil, false
	}
	if h, _ := headerOf(m); h == nil || h.V != Version || h.Type != typ {
		return nil, false
	}
	if check(m, typ) != nil {
		return nil, false
	}
	return m, true
}

// check is what Decode requires of a decoded message of type typ beyond
// its JSON shape.
func check(m any, typ string) error {
	if r, ok := m.(*Register); ok && len(r.Models) == 0 && !r.Ring {
		return errors.New("relaymsg: register: no models, and not a ring member")
	}
	if c, ok := m.(*Chunk); ok && (len(c.Deltas) == 0) == (c.Image == nil) {
		return errors.New("relaymsg: chunk: want Deltas (at least one) or Image, exactly one of them")
	}
	if err := validate.Struct(m); err != nil {
		return fmt.Errorf("relaymsg: %s: %w", typ, err)
	}
	if j, ok := m.(*Job); ok {
		if err := oaiwire.Validate(&j.Request); err != nil {
			return fmt.Errorf("relaymsg: job request: %w", err)
		}
	}
	return nil
}

// Encode stamps the header and marshals a message (a pointer to one of the
// message structs). It fails rather than produce a message over MaxMessage.
func Encode(m any) ([]byte, error) {
	h, typ := headerOf(m)
	if h == nil {
		return nil, fmt.Errorf("relaymsg: %T is not a message", m)
	}
	*h = Header{V: Version, Type: typ}
	// No HTML escaping: json.Marshal writes <, > and & as six-byte \u003c
	// escapes, so a message could grow past MaxMessage each time it was
	// decoded and encoded again (as the relay does to stamp From).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("relaymsg: encode %s: %w", typ, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("relaymsg: encode %s: %w", typ, ErrTooLarge)
	}
	return b, nil
}

// message is implemented by every message struct through its embedded
// Header.
type message interface{ header() *Header }

func (h *Header) header() *Header { return h }

var constructors = map[string]func() message{
	TypeRegister:   func() message { return new(Register) },
	TypeHeartbeat:  func() message { return new(Heartbeat) },
	TypeDrain:      func() message { return new(Drain) },
	TypeChunk:      func() message { return new(Chunk) },
	TypeDone:       func() message { return new(Done) },
	TypeFail:       func() message { return new(Fail) },
	TypeRegistered: func() message { return new(Registered) },
	TypeJob:        func() message { return new(Job) },
	TypeImageJob:   func() message { return new(ImageJob) },
	TypeCancel:     func() message { return new(Cancel) },
	TypeError:      func() message { return new(Error) },
	TypeAssign:     func() message { return new(Assign) },
	TypeLost:       func() message { return new(Lost) },
	TypeHello:      func() message { return new(Hello) },
	TypeWelcome:    func() message { return new(Welcome) },

	TypeRingAnnounce: func() message { return new(RingAnnounce) },
	TypeRingRTT:      func() message { return new(RingRTT) },
	TypeRingReady:    func() message { return new(RingReady) },
	TypeRingRefuse:   func() message { return new(RingRefuse) },
	TypeRingProbe:    func() message { return new(RingProbe) },
	TypeRingAssign:   func() message { return new(RingAssign) },
	TypeRingServe:    func() message { return new(RingServe) },
	TypeRingDisband:  func() message { return new(RingDisband) },
}

// typeNames maps each message struct to its type, built from constructors
// so the two can never disagree.
var typeNames = func() map[reflect.Type]string {
	out := make(map[reflect.Type]string, len(constructors))
	for name, newMsg := range constructors {
		out[reflect.TypeOf(newMsg())] = name
	}
	return out
}()

func headerOf(m any) (*Header, string) {
	msg, ok := m.(message)
	if !ok {
		return nil, ""
	}
	name, ok := typeNames[reflect.TypeOf(m)]
	if !ok {
		return nil, ""
	}
	return msg.header(), name
}
