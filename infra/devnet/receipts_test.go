package devnet_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"testing"

	"github.com/mr-tron/base58"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// signatureField is the receipt JSON's signature member, last of its
// fields: what a verifier deletes to get the signed JSON back.
var signatureField = regexp.MustCompile(`,"signature":"[1-9A-HJ-NP-Za-km-z]+"}$`)

// TestReceiptEndToEnd: a chat streamed through the real network (gateway,
// relay, workerd, Ollama), then GET /v1/receipts/{id} with the same key.
// The receipt verifies offline with crypto/ed25519 alone, as the README
// tells a user to do it, under the pubkey the worker connected with; its
// output hash is the hash of the deltas the client received, its request
// hash that of the request the client sent (as the gateway relays it:
// without user). Another account's key, an unknown id and no key get
// OpenAI-shaped 404s and 401s.
func TestReceiptEndToEnd(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	ctx := context.Background()

	var sent []byte
	capture := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		if r.Body != nil {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			sent = b
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		return next(r)
	})
	params := chatParams("hello world & <friends>", 12)
	params.User = openai.String("end-user-7") // stripped before the worker: not in the hash
	stream := e.client.Chat.Completions.NewStreaming(ctx, params, capture)
	var id, text string
	var received relaymsg.OutputHasher
	for stream.Next() {
		c := stream.Current()
		id = c.ID
		for _, ch := range c.Choices {
			var d oaiwire.Delta
			if err := json.Unmarshal([]byte(ch.Delta.RawJSON()), &d); err != nil {
				t.Fatalf("delta %q: %v", ch.Delta.RawJSON(), err)
			}
			received.Add(d)
			text += d.Content
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if id == "" || text == "" {
		t.Fatalf("stream: id %q, text %q", id, text)
	}

	resp, body := e.get("/receipts/"+id, e.apiKey)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET receipt: %d %s", resp.StatusCode, body)
	}
	var rc struct {
		Job, Worker, Model, Signature string
		ModelDigest                   string `json:"model_digest"`
		RequestSHA256                 string `json:"request_sha256"`
		OutputSHA256                  string `json:"output_sha256"`
		Deltas                        int64
		PromptTokens                  int64 `json:"prompt_tokens"`
		CompletionTokens              int64 `json:"completion_tokens"`
		FirstTokenMillis              int64 `json:"first_token_ms"`
		TotalMillis                   int64 `json:"total_ms"`
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &rc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &fields); err != nil || len(fields) != 12 {
		t.Fatalf("receipt %s: want exactly the 12 receipt fields (%v)", body, err)
	}

	// Offline, with crypto/ed25519 and base58 only: the message is the
	// domain tag and the receipt's JSON without its signature.
	signed := signatureField.ReplaceAll(bytes.TrimSpace(body), []byte("}"))
	if bytes.Equal(signed, bytes.TrimSpace(body)) {
		t.Fatalf("no signature as the last field of %s", body)
	}
	pub, err := base58.Decode(rc.Worker)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("worker %q is not an ed25519 pubkey: %v", rc.Worker, err)
	}
	sig, err := base58.Decode(rc.Signature)
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub, append([]byte("c0mpute-receipt:v1:"), signed...), sig) {
		t.Fatalf("the receipt does not verify offline:\n%s", body)
	}

	ws, err := e.store.Workers(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("workers %v, %v", ws, err)
	}
	job, err := e.store.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Worker != ws[0].Pubkey || job.WorkerPubkey != ws[0].Pubkey {
		t.Errorf("receipt signed by %s, job recorded %s; the worker connected as %s", rc.Worker, job.WorkerPubkey, ws[0].Pubkey)
	}
	if rc.Job != id || rc.Model != tinyModel || len(rc.ModelDigest) != 64 {
		t.Errorf("receipt of job %q, model %q, digest %q", rc.Job, rc.Model, rc.ModelDigest)
	}
	if rc.OutputSHA256 != received.Sum() || rc.Deltas != received.Deltas() {
		t.Errorf("receipt output %s over %d deltas; the client received %s over %d",
			rc.OutputSHA256, rc.Deltas, received.Sum(), received.Deltas())
	}
	req, err := oaiwire.DecodeChatRequest(bytes.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	req.User = ""
	if want, err := relaymsg.RequestHash(req); err != nil || rc.RequestSHA256 != want {
		t.Errorf("request hash %s, want %s (%v)", rc.RequestSHA256, want, err)
	}
	if rc.CompletionTokens != job.CompletionTokens || rc.TotalMillis < rc.FirstTokenMillis {
		t.Errorf("receipt counts %+v, job %+v", rc, job)
	}

	// Only the paying account reads it.
	other, err := e.stack.CreateAccount(ctx, "acct-other-"+t.Name(), 0, "other-grant")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, key string
		status    int
		code      string
	}{
		{"/receipts/" + id, other, http.StatusNotFound, "not_found"},
		{"/receipts/chatcmpl-none", e.apiKey, http.StatusNotFound, "not_found"},
		{"/receipts/" + id, "", http.StatusUnauthorized, "invalid_api_key"},
	} {
		resp, body := e.get(c.path, c.key)
		var env struct {
			Error *struct{ Message, Type, Code string } `json:"error"`
		}
		if err := json.Unmarshal(body, &env); err != nil || resp.StatusCode != c.status || env.Error == nil || env.Error.Code != c.code {
			t.Errorf("GET %s with key %.12q: %d %s; want %d %s in OpenAI's shape", c.path, c.key, resp.StatusCode, body, c.status, c.code)
		}
		if bytes.Contains(body, []byte(rc.Signature)) || bytes.Contains(body, []byte(rc.OutputSHA256)) {
			t.Errorf("GET %s with another key leaked the receipt: %s", c.path, body)
		}
	}
}

// get is an authenticated GET of the API; the body is read whole.
func (e *env) get(path, key string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.stack.APIURL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, body
}
