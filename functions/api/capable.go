package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// bytesPerTokenFloor is how many bytes of prompt text one token is taken
// to hold, at most: English runs at about 4 in the tokenizers contributors'
// models use, so a prompt of n bytes is taken to need n / 8 tokens of
// context. A prompt of long runs of one character (indentation, rules of
// '=') can pack more into a token; such a prompt near a worker's context
// is refused when it might have fitted.
const bytesPerTokenFloor = 8

// needsOf is what a request asks of the worker that serves it.
func needsOf(req *oaiwire.ChatRequest) store.Needs {
	n := store.Needs{
		Tools:          len(req.Tools) > 0,
		ResponseFormat: req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text",
	}
	var text int64
	for _, m := range req.Messages {
		if m.Content.IsParts {
			for _, p := range m.Content.Parts {
				switch {
				case p.Type == "image_url":
					n.Vision = true
				case p.Type == "text":
					text += int64(len(p.Text))
				}
			}
		} else {
			text += int64(len(m.Content.Text))
		}
	}
	n.Context = text / bytesPerTokenFloor
	return n
}

// rosterTTL is how long the list of online workers the capability check
// and the workers view read is reused: a worker that registers is seen
// within it.
const rosterTTL = 2 * time.Second

// roster is a cached list of the online workers.
type roster struct {
	mu         sync.Mutex
	workers    []store.Worker
	read       time.Time
	refreshing bool
}

// liveWorkers returns the online workers as read at most rosterTTL ago (or
// a little more: while one caller reads the store again, the others take
// the list it replaces, so no request waits on another's read); the list
// is shared: callers do not change it.
func (s *Server) liveWorkers(ctx context.Context) ([]store.Worker, error) {
	r := &s.roster
	r.mu.Lock()
	now := s.now()
	if now.Sub(r.read) <= rosterTTL || (r.refreshing && !r.read.IsZero()) {
		ws := r.workers
		r.mu.Unlock()
		return ws, nil
	}
	r.refreshing = true
	r.mu.Unlock()
	ws, err := s.store.Workers(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshing = false
	if err != nil {
		return nil, err
	}
	r.workers, r.read = ws, now
	return ws, nil
}

// unservable says why no online worker can serve a request for model with
// needs n, and the request field to blame, or "" if one can — or if none serving the model is online at
// all (the request queues for one, as before). A store error lets the
// request through: dispatch still sends it only where it can be served.
func (s *Server) unservable(ctx context.Context, model string, n store.Needs) (why, param string) {
	if n == (store.Needs{}) {
		return "", ""
	}
	ws, err := s.liveWorkers(ctx)
	if err != nil {
		s.log.Warn("online workers for the capability check", "err", err)
		return "", ""
	}
	var online []store.Caps
	for _, w := range ws {
		if !w.Registered || !w.Serves(model) {
			continue
		}
		if w.CanServe(model, n) {
			return "", ""
		}
		online = append(online, w.Caps[model])
	}
	if len(online) == 0 {
		return "", ""
	}
	return missing(model, n, online)
}

// missing names what the request needs that no online worker of model
// has, and the field that asks for it.
func missing(model string, n store.Needs, online []store.Caps) (why, param string) {
	var want []string
	has := func(f func(store.Caps) bool) bool {
		for _, c := range online {
			if f(c) {
				return true
			}
		}
		return false
	}
	param = "messages"
	if n.ResponseFormat && !has(func(c store.Caps) bool { return c.ResponseFormat }) {
		want, param = append(want, "response_format"), "response_format"
	}
	if n.Tools && !has(func(c store.Caps) bool { return c.Tools }) {
		want, param = append(want, "tools"), "tools"
	}
	if n.Vision && !has(func(c store.Caps) bool { return c.Vision }) {
		want, param = append(want, "image input"), "messages"
	}
	if len(want) > 0 {
		return fmt.Sprintf("no worker online for %s supports %s", model, strings.Join(want, " or ")), param
	}
	var longest int64
	for _, c := range online {
		longest = max(longest, c.Context)
	}
	if n.Context > longest {
		return fmt.Sprintf("the messages need at least %d tokens of context; the workers online for %s have %d", n.Context, model, longest), "messages"
	}
	return fmt.Sprintf("no worker online for %s supports everything this request asks for at once", model), "messages"
}
