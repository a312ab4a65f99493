package attack_test

// Findings 9a (the requester's identity never reaches a worker), 9b
// (connections per worker token are capped) and 9d (connect signatures are
// single-use).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// TestUserFieldNeverReachesWorker is finding 9a: a request's `user` field
// (the caller's end-user id, by OpenAI's contract) is not relayed: the
// worker that runs a job never learns who sent it. Nor does the Job carry
// the account id or the API key.
func TestUserFieldNeverReachesWorker(t *testing.T) {
	e := newEnv(t, options{})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	endUser := "end-user-" + randomText(8) + "@example.com"
	c := e.start(user.apiKey, chatBody("who am I?", true, "user", endUser))
	j := h.nextJob()
	raw := h.rawJob(j.Job)
	if j.Request.User != "" {
		t.Errorf("the job's request carries user %q", j.Request.User)
	}
	for what, secret := range map[string]string{"the user field": endUser, "the account id": user.id, "the API key": user.apiKey} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the Job message the worker received contains %s", what)
		}
	}
	h.serve(j, 1, "anonymous")
	if r := c.wait(t); !r.ok() || r.Content != "anonymous" {
		t.Errorf("reply: %s", r)
	}
}

// TestConnectionsPerTokenCapped is finding 9b: one worker token holds at
// most store.MaxConnsPerToken live connections; the next connect is
// refused while they are open, and accepted again once one closes.
func TestConnectionsPerTokenCapped(t *testing.T) {
	e := newEnv(t, options{})
	mallory := e.newAccount("mallory", 0)
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	for i := range store.MaxConnsPerToken {
		ws, resp, err := e.dialRelay(signedHeader(mallory.token))
		if err != nil {
			t.Fatalf("connection %d of %d refused (%v): %v", i+1, store.MaxConnsPerToken, status(resp), err)
		}
		conns = append(conns, ws)
	}
	ws, resp, err := e.dialRelay(signedHeader(mallory.token))
	if err == nil {
		ws.CloseNow()
		t.Fatalf("connection %d on one token accepted; want it refused", store.MaxConnsPerToken+1)
	}
	t.Logf("connection %d refused: HTTP %v", store.MaxConnsPerToken+1, status(resp))
	if s := status(resp); s < 400 || s >= 500 {
		t.Errorf("connection %d refused with HTTP %v; want a 4xx (the client's limit, not a server failure)", store.MaxConnsPerToken+1, s)
	}
	conns[0].Close(websocket.StatusNormalClosure, "making room")
	conns = conns[1:]
	e.waitFor("the closed connection's record to go", func() bool { return len(e.workersOf(mallory)) < store.MaxConnsPerToken })
	ws, resp, err = e.dialRelay(signedHeader(mallory.token))
	if err != nil {
		t.Fatalf("a connection under the cap again was refused (%v): %v", status(resp), err)
	}
	conns = append(conns, ws)
}

// status is a response's HTTP status, or -1 when there was none.
func status(resp *http.Response) int {
	if resp == nil {
		return -1
	}
	return resp.StatusCode
}

// TestConnectSignatureReplay is finding 9d: the headers of a worker's
// connect are single-use — replayed while the first connection is open,
// after it closed, or re-sent with a stale timestamp or someone else's key,
// the connect is refused.
func TestConnectSignatureReplay(t *testing.T) {
	e := newEnv(t, options{})
	mallory := e.newAccount("mallory", 0)
	h := signedHeader(mallory.token)
	first, resp, err := e.dialRelay(h)
	if err != nil {
		t.Fatalf("first connect (%v): %v", status(resp), err)
	}
	expectRefusedConnect := func(what string, h http.Header) {
		t.Helper()
		ws, resp, err := e.dialRelay(h)
		if err == nil {
			ws.CloseNow()
			t.Errorf("%s: connect accepted", what)
			return
		}
		if s := status(resp); s != http.StatusUnauthorized && s != http.StatusForbidden {
			t.Errorf("%s: refused with %v; want 401 or 403", what, s)
		}
	}
	expectRefusedConnect("replay while the first is open", h)
	first.Close(websocket.StatusNormalClosure, "")
	e.waitFor("the first connection's record to go", func() bool { return len(e.workersOf(mallory)) == 0 })
	expectRefusedConnect("replay after the first closed", h)

	_, key, _ := ed25519.GenerateKey(rand.Reader)
	stale := http.Header{}
	relaymsg.SignConnect(stale, mallory.token, key, time.Now().Add(-2*relaymsg.ConnectSkew))
	expectRefusedConnect("stale timestamp", stale)

	_, other, _ := ed25519.GenerateKey(rand.Reader)
	swapped := signedHeader(mallory.token)
	probe := http.Header{}
	relaymsg.SignConnect(probe, mallory.token, other, time.Now())
	swapped.Set(relaymsg.HeaderPubkey, probe.Get(relaymsg.HeaderPubkey)) // a signature by one key, claimed for another
	expectRefusedConnect("pubkey swapped", swapped)
}

// revokeOnConnect revokes a worker token right after its connection's
// record is stored: the revoke runs while the connection is still in
// $connect, where the relay cannot yet close it, so its disconnect misses.
type revokeOnConnect struct {
	store.Store
	account, tokenID string
	revoked          chan []string // the connections the revoke reported
}

func (s *revokeOnConnect) PutWorker(ctx context.Context, w store.Worker) error {
	if err := s.Store.PutWorker(ctx, w); err != nil {
		return err
	}
	if w.AccountID == s.account {
		conns, err := s.Store.RevokeWorkerToken(ctx, s.account, s.tokenID, time.Now())
		if err != nil {
			return err
		}
		s.revoked <- conns
	}
	return nil
}

// TestRevokeRacingConnect is the last of finding 9: a token revoked while
// one of its connections is being made must not leave that connection
// live. The revoke's disconnect cannot reach a connection still in
// $connect, so registration — its first message — re-checks the token, is
// refused, and the relay closes the connection. No job reaches it.
func TestRevokeRacingConnect(t *testing.T) {
	race := &revokeOnConnect{revoked: make(chan []string, 1)}
	e := newEnv(t, options{wrap: func(s store.Store) store.Store { race.Store = s; return race }})
	mallory := e.newAccount("mallory", 0)
	toks, err := e.store.ListWorkerTokens(context.Background(), mallory.id)
	if err != nil || len(toks) != 1 {
		t.Fatalf("mallory's tokens: %v, %v", toks, err)
	}
	race.account, race.tokenID = mallory.id, toks[0].ID

	h := e.connectHostile(mallory)
	select {
	case conns := <-race.revoked:
		t.Logf("revoked during $connect; the revoke saw connections %v", conns)
	case <-time.After(waitLimit):
		t.Fatal("the token was not revoked during the connect")
	}
	if err := h.send(&relaymsg.Register{Models: []string{model}, Agent: "hostile"}); err != nil {
		t.Fatalf("register: %v", err)
	}
	if !h.waitClosed(waitLimit) {
		t.Fatal("the connection of a revoked token is still open after registering")
	}
	select {
	case r := <-h.registered:
		t.Errorf("registered as %s on a revoked token", r.Conn)
	default:
	}
	e.waitFor("the closed connection's record to go", func() bool { return len(e.workersOf(mallory)) == 0 })
}
