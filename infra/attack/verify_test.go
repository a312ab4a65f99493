package attack_test

// Issue 12 on the real protocol: capabilities decide where a job may go,
// the speed check rejects a reply faster than any hardware, and the
// contributor sees its workers' standing.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// A request with tools, when no online worker registered tools for the
// model, is a 400 at once naming the field, and costs nothing; once a
// worker that can serve it registers, the job goes to that worker and to
// no other.
func TestCapabilitiesDecideDispatch(t *testing.T) {
	e := newEnv(t, options{})
	user, plain, toolsAcct := e.newAccount("user", 10_000), e.newAccount("plain", 0), e.newAccount("tools", 0)
	e.honestWorker(plain, words("plain", " answer"))
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}}

	r := e.chat(user.apiKey, chatBody("call a tool", false, "tools", tools))
	if r.Status != http.StatusBadRequest || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], `"param":"tools"`) ||
		!strings.Contains(r.Errors[0], "supports tools") {
		t.Fatalf("tools on plain workers: %s; want a 400 on param tools", r)
	}
	e.expectCredits(user, 10_000)

	h := e.connectHostile(toolsAcct)
	if err := h.send(&relaymsg.Register{Models: []string{model}, Agent: "tools",
		Caps: []relaymsg.ModelCaps{{Model: model, Tools: true, Context: 4096}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-h.closed:
				return
			case j := <-h.jobs:
				_ = h.chunk(j, 0, "looked", " up")
				_ = h.done(j, 1, 2)
			}
		}
	}()
	// The capability check reads the online workers every 2 s at most.
	var served reply
	e.waitFor("a tools request to be served", func() bool {
		served = e.chat(user.apiKey, chatBody("call a tool", false, "tools", tools))
		return served.Status != http.StatusBadRequest
	})
	if !served.ok() || served.Content != "looked up" {
		t.Fatalf("tools request with a tools worker online: %s", served)
	}
	if j := e.settled(served.ID); j.WorkerAccount != toolsAcct.id || !j.Needs.Tools {
		t.Errorf("the tools job went to %s with needs %+v; want the tools worker", j.WorkerAccount, j.Needs)
	}
	// Plain requests still go anywhere.
	if r := e.chat(user.apiKey, chatBody("plain question", false)); !r.ok() {
		t.Errorf("plain request: %s", r)
	}
}

// A reply faster than MaxTokPerSec from the job's post to its done was not
// generated: it is rejected, the job refunded, the worker quarantined and
// unpaid.
func TestImpossibleSpeed(t *testing.T) {
	e := newEnv(t, options{limits: func(l *api.Limits) { l.MaxTokPerSec = 1000; l.QueueWait = time.Second }})
	user, mallory := e.newAccount("user", 10_000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = "fast "
	}
	go func() {
		select {
		case <-h.closed:
		case j := <-h.jobs:
			_ = h.chunk(j, 0, texts...)
			_ = h.done(j, 1, int64(len(texts)))
		}
	}()
	if r := e.chat(user.apiKey, chatBody("quick", false)); r.Err != nil || r.ok() || r.Status < 500 {
		t.Fatalf("a reply of 64 tokens at once: %s; want it rejected", r)
	}
	e.expectCredits(user, 10_000)
	rep := e.reputationOf(mallory)
	if rep.Standing != store.StandingQuarantined || rep.LastReason != "impossible_speed" || rep.JobsRejected != 1 {
		t.Errorf("the fast worker: %+v; want quarantined for impossible_speed", rep)
	}
	e.expectEarned(mallory, 0)
}

// GET /v1/workers shows a contributor its worker identities with their
// standing, counts and earnings, and nobody else's.
func TestWorkersView(t *testing.T) {
	e := newEnv(t, options{})
	user, contributor := e.newAccount("user", 10_000), e.newAccount("contributor", 0)
	w := e.honestWorker(contributor, words("hello", " there"))
	r := e.chat(user.apiKey, chatBody("hi", false))
	if !r.ok() {
		t.Fatalf("request: %s", r)
	}
	e.settled(r.ID)
	e.expectEarned(contributor, earning)
	var views []api.WorkerView
	get := func(key string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.stack.APIURL+"/workers", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Object string           `json:"object"`
			Data   []api.WorkerView `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK || list.Object != "list" {
			t.Fatalf("GET /v1/workers: %d, %v", resp.StatusCode, err)
		}
		views = list.Data
	}
	get(contributor.apiKey)
	live := e.workersOf(contributor)
	if len(views) != 1 || len(live) != 1 {
		t.Fatalf("the contributor's workers: %+v (live %d); want its one identity", views, len(live))
	}
	v := views[0]
	if v.ID != live[0].Pubkey || v.Wallet != v.ID || v.TokenID == "" || v.State != "active" || strings.Join(v.Models, ",") != model ||
		v.JobsCompleted != 1 || v.EarnedCredits != earning || v.Strikes != 0 || v.AccountID != "" {
		t.Errorf("the contributor's worker: %+v", v)
	}
	get(user.apiKey)
	if len(views) != 0 {
		t.Errorf("the user sees workers that are not its own: %+v", views)
	}
	w.stop()
	e.waitFor("the stopped worker to show offline", func() bool {
		get(contributor.apiKey)
		return len(views) == 1 && views[0].State == "offline"
	})
}

// A banned identity, and any identity on its worker token, is refused at
// connect with a 403 that says why.
func TestBannedWorkerRefused(t *testing.T) {
	e := newEnv(t, options{})
	mallory := e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	w := e.workersOf(mallory)[0]
	for i := range 3 {
		if _, err := e.store.Judge(context.Background(), store.Verdict{JobID: fmt.Sprintf("canary-%d", i), Conn: w.Conn,
			Pubkey: w.Pubkey, AccountID: mallory.id, TokenHash: w.TokenHash, Kind: store.VerdictCanaryFailed,
			Strikes: store.CanaryStrikes, Reason: "canary_mismatch", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if rep := e.reputationOf(mallory); rep.Standing != store.StandingBanned {
		t.Fatalf("after three failed canaries: %+v; want banned", rep)
	}
	h.ws.CloseNow()
	// A fresh identity key on the same token is refused too.
	_, resp, err := e.dialRelay(signedHeader(mallory.token))
	if err == nil {
		t.Fatal("a banned token connected")
	}
	body := ""
	if resp != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		body = string(b)
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "banned") {
		t.Errorf("connect on a banned token: %v, body %q; want 403 saying banned", err, body)
	}
}

// A verdict can land while the judged worker has jobs running (a canary's,
// or another gateway's): what the worker finishes after it is refused. A
// reply that reached the client in part ends in reply_rejected, refunded;
// one not sent yet goes to another worker, charged once. The judged worker
// earns nothing for either, and takes no new strike for them.
func TestWorkFinishedAfterAVerdictIsRefused(t *testing.T) {
	e := newEnv(t, options{})
	user, contributor := e.newAccount("user", 10_000), e.newAccount("contributor", 0)
	quarantine := func(acct *account) {
		t.Helper()
		w := e.workersOf(acct)[0]
		if _, err := e.store.Judge(context.Background(), store.Verdict{JobID: "canary-" + acct.id, Conn: w.Conn,
			Pubkey: w.Pubkey, AccountID: acct.id, TokenHash: w.TokenHash, Kind: store.VerdictCanaryFailed,
			Strikes: store.CanaryStrikes, Reason: "canary_mismatch", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	judgedOnce := func(acct *account) {
		t.Helper()
		rep := e.reputationOf(acct)
		if rep.Standing != store.StandingQuarantined || rep.Strikes != store.CanaryStrikes || rep.JobsCompleted != 0 ||
			rep.JobsRejected != 0 || rep.EarnedCredits != 0 {
			t.Errorf("%s after its verdict and its refused job: %+v; want quarantined by the verdict alone, nothing earned", acct.id, rep)
		}
		e.expectEarned(acct, 0)
	}

	// Streamed: the first chunk reached the client before the verdict.
	mallory := e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("stream this", true))
	j := h.nextJob()
	if err := h.chunk(j, 0, "partial"); err != nil {
		t.Fatal(err)
	}
	quarantine(mallory)
	if err := h.done(j, 1, 1); err != nil {
		t.Fatal(err)
	}
	r := c.wait(t)
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "reply_rejected") {
		t.Errorf("a stream finished by a worker judged meanwhile: %s; want it ended with reply_rejected", r)
	}
	e.expectRefunded(j.Job)
	e.expectCredits(user, 10_000)
	judgedOnce(mallory)

	// Whole: nothing reached the client, so another worker serves it.
	trudy := e.newAccount("trudy", 0)
	h2 := e.hostileWorker(trudy)
	c = e.start(user.apiKey, chatBody("answer this", false))
	j = h2.nextJob()
	e.honestWorker(contributor, words("good", " answer"))
	quarantine(trudy)
	h2.serve(j, 2, "bad", " answer")
	if r = c.wait(t); !r.ok() || r.Content != "good answer" {
		t.Errorf("a reply finished by a worker judged meanwhile: %s; want another worker's", r)
	}
	if job := e.expectCharged(j.Job); job.WorkerAccount != contributor.id {
		t.Errorf("the job was settled on %s's worker, want %s's", job.WorkerAccount, contributor.id)
	}
	e.expectCredits(user, 10_000-price)
	e.expectEarned(contributor, earning)
	judgedOnce(trudy)
}
