package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// CanaryRequest is a job the gateway makes itself to check a worker (see
// functions/canary): it runs through the same handler, queue, dispatch and
// relay as a user's request, so a worker cannot tell it from one.
type CanaryRequest struct {
	// AccountID and KeyHash are the canary account and its API key, which
	// pay for the job like any account (canaries cost users nothing).
	AccountID string
	KeyHash   string
	Request   *oaiwire.ChatRequest
	// Target is the worker connection the canary is for; "" lets
	// dispatch choose.
	Target string
}

// CanaryReply is how a canary went: the job id (the completion id), the
// reply text when it completed, and the earning its worker gets if the
// answer passes. Err is the API error when it did not complete; a
// rejection by a check was judged already.
type CanaryReply struct {
	JobID string
	// Text is the reply's content; Reasoning a thinking model's
	// reasoning, which comes first.
	Text      string
	Reasoning string
	Earning   int64
	Err       *oaiwire.Error
}

type canaryKey struct{}

// canarySpec marks a request as a canary, in its context: nothing a
// client sends can set it.
type canarySpec struct{ target string }

// Canary runs one canary request to the end and returns its reply. Its
// text stays in memory, with the caller, which judges it.
func (s *Server) Canary(ctx context.Context, c CanaryRequest) (CanaryReply, error) {
	body, err := json.Marshal(c.Request)
	if err != nil {
		return CanaryReply{}, fmt.Errorf("api: canary request: %w", err)
	}
	ctx = context.WithValue(ctx, principalKey{}, principal{account: c.AccountID, keyHash: c.KeyHash})
	ctx = context.WithValue(ctx, canaryKey{}, canarySpec{target: c.Target})
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return CanaryReply{}, err
	}
	w := &replyRecorder{header: http.Header{}, status: http.StatusOK}
	if err := s.chat(w, r); err != nil {
		var e *oaiwire.Error
		if !errors.As(err, &e) {
			return CanaryReply{}, err
		}
		return CanaryReply{Err: e}, nil
	}
	var resp struct {
		ID      string `json:"id"`
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				Reasoning string  `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
		Error *oaiwire.Error `json:"error"`
	}
	if err := json.Unmarshal(w.body.Bytes(), &resp); err != nil {
		return CanaryReply{}, fmt.Errorf("api: canary reply: %w", err)
	}
	if w.status != http.StatusOK || resp.Error != nil || len(resp.Choices) == 0 {
		e := resp.Error
		if e == nil {
			e = &oaiwire.Error{Status: w.status, Code: "no_reply"}
		}
		e.Status = w.status
		return CanaryReply{JobID: resp.ID, Err: e}, nil
	}
	reply := CanaryReply{JobID: resp.ID, Reasoning: resp.Choices[0].Message.Reasoning}
	if t := resp.Choices[0].Message.Content; t != nil {
		reply.Text = *t
	}
	if m, ok := s.catalog.Resolve(c.Request.Model); ok {
		// The worker's share, boosted or not, as for any job.
		account := ""
		if job, err := s.store.GetJob(ctx, resp.ID); err == nil {
			account = job.WorkerAccount
		}
		reply.Earning = s.earningFor(ctx, m.Price, account, s.now())
	}
	return reply, nil
}

// canaryOf says whether a request is a canary, and for which worker.
func canaryOf(r *http.Request) (canarySpec, bool) {
	spec, ok := r.Context().Value(canaryKey{}).(canarySpec)
	return spec, ok
}

// replyRecorder is the response writer of a canary: the gateway is its
// own client.
type replyRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *replyRecorder) Header() http.Header         { return w.header }
func (w *replyRecorder) WriteHeader(status int)      { w.status = status }
func (w *replyRecorder) Write(b []byte) (int, error) { return w.body.Write(b) }
