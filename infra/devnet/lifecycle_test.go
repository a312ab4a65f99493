package devnet_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

// TestDispatchOnRegistration: a job that arrives while no worker is online
// (one left a moment ago) waits in the queue (the stream gets keep-alive
// comments) and is served as soon as a worker registers.
func TestDispatchOnRegistration(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.KeepAliveAfter = 50 * time.Millisecond
	limits.KeepAliveEvery = 50 * time.Millisecond
	e := newEnv(t, envOptions{credits: 100, limits: &limits})
	srv := sharedOllama(t)
	e.workerLeft(tinyModel)

	body := `{"model":"tiny","stream":true,"max_tokens":6,"temperature":0,"messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest(http.MethodPost, e.stack.APIURL+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	type result struct {
		lines []string
		err   error
	}
	res := make(chan result, 1)
	keptAlive := make(chan struct{})
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				if sc.Text() == ": keep-alive" && len(lines) == 0 {
					close(keptAlive)
				}
				lines = append(lines, sc.Text())
			}
		}
		res <- result{lines: lines}
	}()
	// Wait until the job is queued and the client has its first
	// keep-alive, then bring a worker.
	waitFor(t, "queued job", func() bool {
		st, err := e.store.Stats(context.Background(), time.Now())
		return err == nil && st.QueueByModel[tinyModel] == 1
	})
	select {
	case <-keptAlive:
	case r := <-res:
		t.Fatalf("the stream ended before a worker came: %v %q", r.err, r.lines)
	case <-time.After(10 * time.Second):
		t.Fatal("no keep-alive reached the client of a queued job in 10 s")
	}
	e.startWorker(ollamaBackend(srv), map[string]string{tinyModel: tinyModel})
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.lines) == 0 || r.lines[0] != ": keep-alive" {
		t.Errorf("stream does not start with keep-alive comments: %q", r.lines)
	}
	if last := r.lines[len(r.lines)-1]; last != "data: [DONE]" {
		t.Errorf("stream did not finish: %q", r.lines)
	}
	if got := e.balance().Credits; got != 90 {
		t.Errorf("balance %d", got)
	}
}

// TestNoWorkerRefunds: with nobody serving, the request gets 503 after the
// queue wait and its price back.
func TestNoWorkerRefunds(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.QueueWait = 200 * time.Millisecond
	limits.KeepAliveAfter = time.Minute
	e := newEnv(t, envOptions{credits: 100, limits: &limits})
	_, err := e.client.Chat.Completions.New(context.Background(), chatParams("hello", 4))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("want 503, got %v", err)
	}
	a := e.balance()
	if a.Credits != 100 || a.TotalSpent != 0 {
		t.Errorf("credits %d spent %d after refund", a.Credits, a.TotalSpent)
	}
}

// TestClientDisconnectCancels: a client that goes away mid-stream cancels
// the job on the worker, which is free for the next job at once. The user
// caused it, so no refund.
func TestClientDisconnectCancels(t *testing.T) {
	e := newEnv(t, envOptions{credits: 100})
	e.ollamaWorker()
	ctx, cancel := context.WithCancel(context.Background())
	p := chatParams("hello", 200)
	s := e.client.Chat.Completions.NewStreaming(ctx, p)
	var id string
	for s.Next() {
		id = s.Current().ID
		if len(s.Current().Choices) > 0 && s.Current().Choices[0].Delta.Content != "" {
			break
		}
	}
	cancel()
	s.Close()
	if id == "" {
		t.Fatal("no chunk before cancel")
	}
	waitFor(t, "job failed as client_gone and worker idle", func() bool {
		j, err := e.store.GetJob(context.Background(), id)
		ws, _ := e.store.IdleWorkers(context.Background(), tinyModel)
		return err == nil && j.State == store.JobFailed && j.FailReason == "client_gone" && len(ws) == 1
	})
	// The worker serves the next request. The cancelled job was settled
	// (failed, its worker freed) before; once its worker has also finished
	// another job, whatever the cancel set off has run: the cancelled job
	// must still be unrefunded, and each job charged exactly once.
	if _, err := e.client.Chat.Completions.New(context.Background(), chatParams("hello", 4)); err != nil {
		t.Fatal(err)
	}
	j, _ := e.store.GetJob(context.Background(), id)
	if j.State != store.JobFailed || j.Refunded {
		t.Errorf("client-cancelled job %s refunded %v, want failed and not refunded", j.State, j.Refunded)
	}
	if a := e.balance(); a.Credits != 80 || a.TotalSpent != 20 {
		t.Errorf("credits %d spent %d, want 80 and 20: both jobs charged, neither refunded", a.Credits, a.TotalSpent)
	}
}

// TestWorkerAuth: a worker connects only with a live token and a fresh,
// unreplayed signature by the key it names; revoking the token disconnects
// its live workers at once.
func TestWorkerAuth(t *testing.T) {
	e := newEnv(t, envOptions{credits: 100})
	tok, err := e.stack.IssueWorkerToken(context.Background(), e.account)
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	dial := func(h http.Header) (*websocket.Conn, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, e.stack.RelayURL, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			if resp == nil {
				t.Fatalf("dial: %v", err)
			}
			return nil, resp.StatusCode
		}
		return c, 101
	}
	signed := func(token string, at time.Time) http.Header {
		h := http.Header{}
		relaymsg.SignConnect(h, token, key, at)
		return h
	}
	now := time.Now()
	good := signed(tok, now)
	tampered := good.Clone()
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherHeaders := http.Header{}
	relaymsg.SignConnect(otherHeaders, tok, other, now)
	tampered.Set(relaymsg.HeaderSignature, otherHeaders.Get(relaymsg.HeaderSignature))
	unknown, _, _ := credential.New(credential.WorkerTokenPrefix)

	cases := []struct {
		name   string
		h      http.Header
		status int
	}{
		{"no headers", http.Header{}, 401},
		{"unknown token", signed(unknown, now), 401},
		{"stale timestamp", signed(tok, now.Add(-10*time.Minute)), 401},
		{"future timestamp", signed(tok, now.Add(10*time.Minute)), 401},
		{"signature by another key", tampered, 401},
		{"listener secret guess", http.Header{relaymsg.HeaderListener: []string{"guess"}}, 401},
	}
	for _, c := range cases {
		if _, status := dial(c.h); status != c.status {
			t.Errorf("%s: status %d, want %d", c.name, status, c.status)
		}
	}
	conn, status := dial(good)
	if status != 101 {
		t.Fatalf("good connect: %d", status)
	}
	if _, status := dial(good); status != 401 {
		t.Errorf("replayed signature: status %d, want 401", status)
	}
	// Register, then revoke the token through the API: the connection
	// must close.
	reg, _ := relaymsg.Encode(&relaymsg.Register{Models: []string{tinyModel}})
	if err := conn.Write(context.Background(), websocket.MessageText, reg); err != nil {
		t.Fatal(err)
	}
	e.waitWorkers(tinyModel, 1)
	toks, err := e.store.ListWorkerTokens(context.Background(), e.account)
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens %v %v", toks, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, e.stack.APIURL+"/worker-tokens/"+toks[0].ID, nil)
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, _, err := conn.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("revoked worker still connected after 5 s")
			}
			break
		}
	}
	// $disconnect runs just after the close, as in AWS.
	waitFor(t, "revoked worker removed", func() bool {
		ws, err := e.store.Workers(context.Background())
		return err == nil && len(ws) == 0
	})
	if _, status := dial(signed(tok, time.Now().Add(time.Millisecond))); status != 403 {
		t.Errorf("revoked token connect: status %d, want 403", status)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestNoWorkerAfterKeepAlive: a stream that already sent keep-alive
// comments can no longer change its status, so the queue timeout arrives
// as exactly one error event; the price comes back.
func TestNoWorkerAfterKeepAlive(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.KeepAliveAfter = 50 * time.Millisecond
	limits.KeepAliveEvery = 50 * time.Millisecond
	limits.QueueWait = 300 * time.Millisecond
	e := newEnv(t, envOptions{credits: 100, limits: &limits})
	e.workerLeft(tinyModel)
	body := `{"model":"tiny","stream":true,"max_tokens":6,"messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest(http.MethodPost, e.stack.APIURL+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var keepAlives int
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == ": keep-alive":
			keepAlives++
		case strings.HasPrefix(line, "data: "):
			data = append(data, line)
		}
	}
	if keepAlives == 0 {
		t.Error("no keep-alive before the timeout")
	}
	if len(data) != 1 || !strings.Contains(data[0], `"code":"no_worker_available"`) {
		t.Errorf("want exactly one no_worker_available error event, got %q", data)
	}
	if a := e.balance(); a.Credits != 100 || a.TotalSpent != 0 {
		t.Errorf("credits %d spent %d after refund", a.Credits, a.TotalSpent)
	}
}

// TestUnservedModelFailsFast: a request for a model no worker serves, and
// none did lately, is a 503 at once that names the models with workers
// online, and no job is made (nothing charged, nothing in the ledger); once
// a worker of it was seen a moment ago, requests queue for it again.
func TestUnservedModelFailsFast(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.QueueWait = 300 * time.Millisecond
	e := newEnv(t, envOptions{credits: 100, limits: &limits,
		models: []catalog.Model{{ID: tinyModel, Price: 10}, {ID: "unserved", Price: 10}}})
	e.ollamaWorker()
	ask := func() *openai.Error {
		t.Helper()
		params := chatParams("hello", 4)
		params.Model = "unserved"
		_, err := e.client.Chat.Completions.New(context.Background(), params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("a request for a model nobody serves: %v; want an API error", err)
		}
		return apiErr
	}
	type ledger struct {
		Data []struct {
			Type string `json:"type"`
		} `json:"data"`
	}
	var before ledger
	e.call(http.MethodGet, "/transactions", e.apiKey, &before)

	fast := ask()
	if fast.StatusCode != http.StatusServiceUnavailable || fast.Code != "no_worker_available" ||
		!strings.Contains(fast.Message, "Models with workers online now: "+tinyModel+".") {
		t.Errorf("unserved model: %d %s %q; want a 503 no_worker_available naming %s", fast.StatusCode, fast.Code, fast.Message, tinyModel)
	}
	var after ledger
	e.call(http.MethodGet, "/transactions", e.apiKey, &after)
	if a := e.balance(); a.Credits != 100 || len(after.Data) != len(before.Data) {
		t.Errorf("after the fast 503: %d credits, %d ledger entries (was %d); want nothing charged or written", a.Credits, len(after.Data), len(before.Data))
	}

	// A worker of the model left a moment ago: the request queues, and
	// times out after the queue wait, refunded.
	e.workerLeft("unserved")
	// The gateway's figures are up to half a second old: until they show
	// the worker, the answer is still the free one.
	var queued *openai.Error
	e.waitFor("the model to be waited for", func() bool {
		queued = ask()
		return !strings.Contains(queued.Message, "none has been lately")
	})
	if queued.StatusCode != http.StatusServiceUnavailable || strings.Contains(queued.Message, "none has been lately") {
		t.Errorf("model seen lately: %d %q; want the queue's 503", queued.StatusCode, queued.Message)
	}
	e.call(http.MethodGet, "/transactions", e.apiKey, &after)
	var charges, refunds int
	for _, l := range after.Data[:len(after.Data)-len(before.Data)] {
		switch l.Type {
		case "charge":
			charges++
		case "refund":
			refunds++
		}
	}
	if a := e.balance(); a.Credits != 100 || charges != 1 || refunds != 1 {
		t.Errorf("after the queued request: %d credits, %d charges, %d refunds; want 100, 1, 1", a.Credits, charges, refunds)
	}
}
