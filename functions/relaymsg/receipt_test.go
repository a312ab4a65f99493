package relaymsg

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// sampleKey is a fixed identity key, so the sample receipt and the seed
// corpus are the same on every run (ed25519 signatures are deterministic).
var sampleKey = ed25519.NewKeyFromSeed([]byte("c0mpute relaymsg test identity!!"))

// sampleReceipt is a signed receipt of the sample job.
func sampleReceipt() *Receipt {
	r := &Receipt{Job: "job_1", Model: "llama3.1:8b", ModelDigest: "sha256:" + strings.Repeat("0f", 32),
		RequestSHA256: strings.Repeat("ab", 32), OutputSHA256: strings.Repeat("cd", 32), Deltas: 4,
		PromptTokens: 12, CompletionTokens: 34, FirstTokenMillis: 85, TotalMillis: 1234}
	if err := SignReceipt(sampleKey, r); err != nil {
		panic(err)
	}
	return r
}

// receiptJSON is the sample receipt's JSON, changed by edit (nil: as is).
func receiptJSON(edit func(map[string]any)) string {
	b, err := json.Marshal(sampleReceipt())
	if err != nil {
		panic(err)
	}
	if edit == nil {
		return string(b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		panic(err)
	}
	return string(b)
}

// doneRaw is a valid done message but for its receipt, raw JSON.
func doneRaw(receipt string) string {
	return `{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"stop","ticket":"` + tkt + `","receipt":` + receipt + `}`
}

// doneWith is a done message with the sample receipt changed by edit; nil
// edit: a done without a receipt.
func doneWith(edit func(map[string]any)) string {
	if edit == nil {
		return `{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"stop","ticket":"` + tkt + `"}`
	}
	return doneRaw(receiptJSON(edit))
}

func TestReceiptSignVerify(t *testing.T) {
	r := sampleReceipt()
	if err := VerifyReceipt(r); err != nil {
		t.Fatalf("a signed receipt: %v", err)
	}
	if want := base58.Encode(sampleKey.Public().(ed25519.PublicKey)); r.Worker != want {
		t.Fatalf("worker %q, want the signing key %q", r.Worker, want)
	}
	_, other, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPub := base58.Encode(other.Public().(ed25519.PublicKey))
	// Every signed field is covered: changing any one breaks the signature.
	changes := map[string]func(*Receipt){
		"job":               func(r *Receipt) { r.Job = "job_2" },
		"worker":            func(r *Receipt) { r.Worker = otherPub },
		"model":             func(r *Receipt) { r.Model = "llama3.1:70b" },
		"model_digest":      func(r *Receipt) { r.ModelDigest = "" },
		"request_sha256":    func(r *Receipt) { r.RequestSHA256 = strings.Repeat("ac", 32) },
		"output_sha256":     func(r *Receipt) { r.OutputSHA256 = strings.Repeat("ce", 32) },
		"deltas":            func(r *Receipt) { r.Deltas++ },
		"prompt_tokens":     func(r *Receipt) { r.PromptTokens++ },
		"completion_tokens": func(r *Receipt) { r.CompletionTokens-- },
		"first_token_ms":    func(r *Receipt) { r.FirstTokenMillis = 0 },
		"total_ms":          func(r *Receipt) { r.TotalMillis++ },
		"signature, another key": func(r *Receipt) {
			w := r.Worker
			if err := SignReceipt(other, r); err != nil {
				t.Fatal(err)
			}
			r.Worker = w
		},
		"signature, not base58":     func(r *Receipt) { r.Signature = strings.Repeat("0", 88) },
		"signature, too short":      func(r *Receipt) { r.Signature = base58.Encode(make([]byte, 50)) + strings.Repeat("1", 14) },
		"worker, not a key":         func(r *Receipt) { r.Worker = strings.Repeat("I", 44) },
		"worker, not 32 bytes":      func(r *Receipt) { r.Worker = base58.Encode([]byte(strings.Repeat("k", 33))) },
		"request hash, not hex":     func(r *Receipt) { r.RequestSHA256 = strings.Repeat("zz", 32) },
		"deltas, out of bounds":     func(r *Receipt) { r.Deltas = -1 },
		"signature, missing":        func(r *Receipt) { r.Signature = "" },
		"total_ms, out of bounds":   func(r *Receipt) { r.TotalMillis = MaxReceiptMillis + 1 },
		"completion, out of bounds": func(r *Receipt) { r.CompletionTokens = MaxReceiptCount + 1 },
	}
	for name, change := range changes {
		r := sampleReceipt()
		change(r)
		if err := VerifyReceipt(r); !errors.Is(err, ErrBadReceipt) {
			t.Errorf("%s changed: VerifyReceipt = %v, want ErrBadReceipt", name, err)
		}
	}
	// Signed by another key and naming it: valid, as a receipt of that
	// key's; whose key it must be is the verifier's question.
	r = sampleReceipt()
	if err := SignReceipt(other, r); err != nil {
		t.Fatal(err)
	}
	if err := VerifyReceipt(r); err != nil || r.Worker != otherPub {
		t.Errorf("re-signed by another key: %v, worker %s", err, r.Worker)
	}
	if err := VerifyReceipt(nil); !errors.Is(err, ErrBadReceipt) {
		t.Errorf("no receipt: %v", err)
	}
	if err := SignReceipt(ed25519.PrivateKey("short"), sampleReceipt()); err == nil {
		t.Error("SignReceipt with a 5-byte key succeeded")
	}
}

// The signed message is what the README tells a user to rebuild: the domain
// tag, then the receipt's JSON without its signature, in field order.
func TestReceiptSignedMessage(t *testing.T) {
	r := sampleReceipt()
	msg, err := r.signedMessage()
	if err != nil {
		t.Fatal(err)
	}
	want := `c0mpute-receipt:v1:{"job":"job_1","worker":"` + r.Worker + `","model":"llama3.1:8b","model_digest":"sha256:` +
		strings.Repeat("0f", 32) + `","request_sha256":"` + strings.Repeat("ab", 32) + `","output_sha256":"` + strings.Repeat("cd", 32) +
		`","deltas":4,"prompt_tokens":12,"completion_tokens":34,"first_token_ms":85,"total_ms":1234}`
	if string(msg) != want {
		t.Fatalf("signed message\n got %s\nwant %s", msg, want)
	}
	// The same from the receipt's own JSON, parsed and re-encoded with
	// the signature deleted, as a verifier in any language does it.
	full, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(full, &fields); err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["signature"]; !ok || len(fields) != 12 {
		t.Fatalf("receipt JSON %s: want 12 fields with the signature", full)
	}
	pub, _ := base58.Decode(r.Worker)
	sig, _ := base58.Decode(r.Signature)
	if !ed25519.Verify(pub, []byte(want), sig) {
		t.Fatal("the signature does not verify over the documented message")
	}
	// An empty digest is still a field of the signed encoding.
	r.ModelDigest = ""
	if msg, _ := r.signedMessage(); !strings.Contains(string(msg), `"model_digest":""`) {
		t.Errorf("no model_digest in %s", msg)
	}
}

func TestOutputHasher(t *testing.T) {
	idx := 0
	reply := []oaiwire.Delta{
		{Role: "assistant", Content: "Hel"},
		{},
		{Role: "assistant"}, // role alone: nothing the client sees
		{ToolCalls: []oaiwire.ToolCall{{Index: &idx, Type: "function"}}}, // no text: not relayed
		{Content: "lo <b> & \u2028"},
		{Reasoning: "hmm"},
		{ToolCalls: []oaiwire.ToolCall{{Index: &idx, ID: "call_1", Type: "function", Function: oaiwire.FunctionCall{Name: "f", Arguments: `{"a":`}}}},
	}
	var o OutputHasher
	for _, d := range reply {
		o.Add(d)
	}
	// By hand: json.Marshal of each delta with content, role left out.
	var lines strings.Builder
	for _, d := range []oaiwire.Delta{reply[0], reply[4], reply[5], reply[6]} {
		d.Role = ""
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		lines.Write(b)
		lines.WriteString("\n")
	}
	sum := sha256.Sum256([]byte(lines.String()))
	if got, want := o.Sum(), hex.EncodeToString(sum[:]); got != want || o.Deltas() != 4 {
		t.Errorf("Sum %s over %d deltas, want %s over 4", got, o.Deltas(), want)
	}
	var empty OutputHasher
	if empty.Sum() != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" || empty.Deltas() != 0 {
		t.Errorf("empty reply: %s, %d", empty.Sum(), empty.Deltas())
	}
}

// A worker hashes the deltas it sends; the gateway hashes them as it
// decoded them. Text that is not valid UTF-8 (a token that splits a
// character) is changed by the encoding on the way, and the hashes must
// agree all the same.
func TestOutputHasherOverTheWire(t *testing.T) {
	idx := 1
	sent := []oaiwire.Delta{
		{Content: "caf\xc3"},
		{Content: "\xa9 ok", Reasoning: "\xff\xfe\xfd"},
		{ToolCalls: []oaiwire.ToolCall{{Index: &idx, ID: "c\x80", Function: oaiwire.FunctionCall{Name: "f", Arguments: "{\"x\":\"\xe2\x82\"}"}}}},
		{Content: "\ufffd already a replacement"},
	}
	orig := fmt.Sprintf("%#v", sent)
	var worker OutputHasher
	for _, d := range sent {
		worker.Add(d)
	}
	if fmt.Sprintf("%#v", sent) != orig {
		t.Fatal("Add changed the caller's deltas")
	}
	b, err := Encode(&Chunk{Job: "j", To: "c", Deltas: sent, Ticket: tkt})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var gateway OutputHasher
	for _, d := range m.(*Chunk).Deltas {
		gateway.Add(d)
	}
	if worker.Sum() != gateway.Sum() || worker.Deltas() != gateway.Deltas() {
		t.Errorf("worker %s (%d), gateway %s (%d)", worker.Sum(), worker.Deltas(), gateway.Sum(), gateway.Deltas())
	}
}

func TestPeekType(t *testing.T) {
	for in, want := range map[string]string{
		doneWith(nil):                   TypeDone,
		`{"v":7,"type":"fail"}`:         TypeFail,
		`{"type":"done","job":[]}`:      TypeDone,
		`{"v":1,"type":3}`:              "",
		`[]`:                            "",
		`{`:                             "",
		``:                              "",
		`{"v":1,"type":"done"}` + " x":  "",
		`{"v":1,"type":"chunk","x":{}}`: TypeChunk,
	} {
		if got := PeekType([]byte(in)); got != want {
			t.Errorf("PeekType(%.40q) = %q, want %q", in, got, want)
		}
	}
}

// A worker signs the receipt of a job it completed; anyone checks it
// with the worker's pubkey alone.
func ExampleSignReceipt() {
	key := ed25519.NewKeyFromSeed([]byte("an example worker identity seed!"))
	var out OutputHasher
	for _, d := range []oaiwire.Delta{{Role: "assistant", Content: "Hello"}, {Content: " world"}} {
		out.Add(d) // as each delta is sent
	}
	req := &oaiwire.ChatRequest{Model: "c0mpute-pro", Messages: []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: "hi"}}}}
	reqHash, err := RequestHash(req)
	if err != nil {
		panic(err)
	}
	r := &Receipt{Job: "chatcmpl-abc", Model: "c0mpute-pro", RequestSHA256: reqHash,
		OutputSHA256: out.Sum(), Deltas: out.Deltas(), PromptTokens: 9, CompletionTokens: 2,
		FirstTokenMillis: 40, TotalMillis: 95}
	if err := SignReceipt(key, r); err != nil {
		panic(err)
	}
	fmt.Println(r.Worker)
	fmt.Println(VerifyReceipt(r))

	r.CompletionTokens = 200 // a claim the worker did not sign
	fmt.Println(VerifyReceipt(r))
	// Output:
	// 2z1zif7e9uup6NA4KQcNBRsnZZPfoBYyST9CfcY2XdKk
	// <nil>
	// relaymsg: bad receipt: signature does not verify
}
