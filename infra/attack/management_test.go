package attack_test

// Finding 3: the @connections management API (post to, inspect and close
// any connection) must not be reachable by whoever can reach the workers'
// relay address, and on its own address only with a valid signature.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// managementTargets are the connections an attacker would go for: the API
// listener (closing it strands every stream; posting to it forges replies)
// and an honest worker (closing it takes its job; posting to it forges
// jobs and cancels).
type managementTarget struct {
	name string
	conn string
	body []byte // what a POST sends
}

// managementStage is an honest worker serving, and the two targets.
func managementStage(t *testing.T) (*env, *account, string, []managementTarget) {
	e := newEnv(t, options{})
	user, honestAcct := e.newAccount("user", 1000), e.newAccount("honest", 0)
	e.honestWorker(honestAcct, words("Hello", " world"))
	ws := e.workersOf(honestAcct)
	if len(ws) != 1 {
		t.Fatalf("%d honest workers", len(ws))
	}
	lconn, err := e.stack.Listener().Conn()
	if err != nil {
		t.Fatal(err)
	}
	toListener, _ := relaymsg.Encode(&relaymsg.Lost{Job: "chatcmpl-forged", Worker: ws[0].Conn})
	toWorker, _ := relaymsg.Encode(&relaymsg.Cancel{Job: "chatcmpl-forged"})
	return e, user, ws[0].Conn, []managementTarget{
		{"listener", lconn, toListener},
		{"worker", ws[0].Conn, toWorker},
	}
}

// expectUnharmed checks the targets live on: the listener kept its
// connection, the worker kept its connection and still gets jobs, and a
// chat request succeeds.
func expectUnharmed(t *testing.T, e *env, user *account, worker string, targets []managementTarget) {
	t.Helper()
	if now, err := e.stack.Listener().Conn(); err != nil || now != targets[0].conn {
		t.Errorf("the API listener's connection is now %q (%v); was %q", now, err, targets[0].conn)
	}
	if _, err := e.store.GetWorker(context.Background(), worker); err != nil {
		t.Errorf("the honest worker's connection %s: %v", worker, err)
	}
	r := e.chat(user.apiKey, chatBody("after the management calls", false))
	if !r.ok() || r.Content != "Hello world" {
		t.Fatalf("chat after the management calls: %s", r)
	}
	if j := e.settled(r.ID); j.Worker != worker {
		t.Errorf("the job went to %q; want the honest worker's connection %q", j.Worker, worker)
	}
}

// fakeSigV4 is an Authorization header in SigV4's shape with a made-up key
// and signature.
const fakeSigV4 = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20250101/us-east-1/execute-api/aws4_request, " +
	"SignedHeaders=host;x-amz-date, Signature=0000000000000000000000000000000000000000000000000000000000000000"

// managementCall makes one management request.
func managementCall(t *testing.T, e *env, method, u string, body []byte, sign func(*http.Request, []byte)) (int, string) {
	t.Helper()
	var rd io.Reader
	if method == http.MethodPost {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if sign != nil {
		sign(req, body)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, string(b)
}

func fakeSign(req *http.Request, _ []byte) {
	req.Header.Set("Authorization", fakeSigV4)
	req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
}

// realSign signs with SigV4, correctly, with credentials the relay does not
// hold.
func realSign(keyID, secret string) func(*http.Request, []byte) {
	return func(req *http.Request, body []byte) {
		sum := sha256.Sum256(body)
		if req.Method != http.MethodPost {
			sum = sha256.Sum256(nil)
		}
		err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret},
			req, hex.EncodeToString(sum[:]), "execute-api", "us-east-1", time.Now())
		if err != nil {
			panic(err)
		}
	}
}

// TestManagementFromWorkerPort is finding 3: from the address workers
// connect to, GET, POST and DELETE on /@connections/{id} and
// /local/@connections/{id}, unsigned or with a SigV4-looking header, for
// the API listener's connection and an honest worker's. Before, the relay
// served them there, unsigned: anyone could close the listener (every
// stream failed) or post forged messages. Now every one is refused and
// nothing changes.
func TestManagementFromWorkerPort(t *testing.T) {
	e, user, worker, targets := managementStage(t)
	for _, tg := range targets {
		for _, prefix := range []string{"", "/local"} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				for _, auth := range []struct {
					name string
					sign func(*http.Request, []byte)
				}{{"unsigned", nil}, {"fake-sigv4", fakeSign}, {"foreign-sigv4", realSign("AKIAATTACKER0000000", "not-the-secret")}} {
					u := e.relayHTTP() + prefix + "/@connections/" + url.PathEscape(tg.conn)
					status, body := managementCall(t, e, method, u, tg.body, auth.sign)
					// 410 is the management API itself answering (the
					// connection it looked up is gone): not a refusal.
					if status < 400 || status == http.StatusGone {
						t.Errorf("%s %s (%s, the %s's connection): %d %.100s; want it refused", method, u, auth.name, tg.name, status, body)
					}
				}
			}
		}
	}
	expectUnharmed(t, e, user, worker, targets)
}

// TestManagementNeedsSignature is finding 3's second half: on the
// management API's own address, requests unsigned, with a SigV4-looking
// header, or properly signed with someone else's credentials are refused
// (403) and change nothing.
func TestManagementNeedsSignature(t *testing.T) {
	e, user, worker, targets := managementStage(t)
	base := e.stack.ManagementURL
	for _, tg := range targets {
		for _, prefix := range []string{"", "/local"} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				for _, auth := range []struct {
					name string
					sign func(*http.Request, []byte)
				}{{"unsigned", nil}, {"fake-sigv4", fakeSign}, {"foreign-sigv4", realSign("AKIAATTACKER0000000", "not-the-secret")}} {
					u := base + prefix + "/@connections/" + url.PathEscape(tg.conn)
					status, body := managementCall(t, e, method, u, tg.body, auth.sign)
					if status != http.StatusForbidden {
						t.Errorf("%s %s (%s, the %s's connection): %d %.100s; want 403", method, u, auth.name, tg.name, status, body)
					}
				}
			}
		}
	}
	expectUnharmed(t, e, user, worker, targets)
}
