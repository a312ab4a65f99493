package oaiwire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// FuzzDecodeChatRequest: decoding never panics; a refusal is an *Error with
// status 400 or 413 whose JSON is OpenAI's error shape; an accepted request
// re-marshals (as the gateway relays it to a worker) into a body that is
// accepted again and marshals the same. Seeds are in
// testdata/fuzz/FuzzDecodeChatRequest, plus the valid requests of
// validate_test.go.
func FuzzDecodeChatRequest(f *testing.F) {
	for _, c := range validRequests {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := oaiwire.DecodeChatRequest(bytes.NewReader(body))
		if err != nil {
			var e *oaiwire.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *oaiwire.Error", err, err)
			}
			if e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d for %v", e.Status, e)
			}
			if err := checkErrorJSON(e.JSON()); err != nil {
				t.Fatal(err)
			}
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("accepted request does not marshal: %v", err)
		}
		again, err := oaiwire.DecodeChatRequest(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("re-marshalled request rejected: %v\nbody %q\nre-marshalled %s", err, body, b)
		}
		b2, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("marshal is not stable:\n%s\n%s", b, b2)
		}
	})
}
