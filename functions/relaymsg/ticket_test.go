package relaymsg

import (
	"fmt"
	"testing"
)

func TestTicket(t *testing.T) {
	a := NewTicketer("listener-secret-0123456789abcdef0123456789")
	b := NewTicketer("another-secret-0123456789abcdef0123456789ab")
	tk := a.Issue("chatcmpl-1", "workerConnA=", "listenerConn=")
	if len(tk) != TicketLen {
		t.Fatalf("ticket %q is %d characters, want %d", tk, len(tk), TicketLen)
	}
	tests := []struct {
		name                  string
		tk                    *Ticketer
		ticket, job, from, to string
		want                  bool
	}{
		{"as issued", a, tk, "chatcmpl-1", "workerConnA=", "listenerConn=", true},
		{"another job", a, tk, "chatcmpl-2", "workerConnA=", "listenerConn=", false},
		{"another sender", a, tk, "chatcmpl-1", "workerConnB=", "listenerConn=", false},
		{"another listener", a, tk, "chatcmpl-1", "workerConnA=", "otherListen=", false},
		{"another key", b, tk, "chatcmpl-1", "workerConnA=", "listenerConn=", false},
		// Field boundaries are part of the MAC: moving bytes between
		// fields does not keep a ticket valid.
		{"shifted fields", a, tk, "chatcmpl-1w", "orkerConnA=", "listenerConn=", false},
		{"empty", a, "", "chatcmpl-1", "workerConnA=", "listenerConn=", false},
		{"not base64", a, tk[:TicketLen-1] + "*", "chatcmpl-1", "workerConnA=", "listenerConn=", false},
		{"padded", a, tk + "=", "chatcmpl-1", "workerConnA=", "listenerConn=", false},
	}
	for _, tt := range tests {
		if got := tt.tk.Valid(tt.ticket, tt.job, tt.from, tt.to); got != tt.want {
			t.Errorf("%s: Valid = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The API issues a ticket when it hands a job to a worker; the relay checks
// it against the connection a message really came from.
func ExampleTicketer() {
	api := NewTicketer("the gateway's listener secret, at least 32 bytes")
	ticket := api.Issue("chatcmpl-abc", "workerConn1=", "listenerConn=")

	relay := NewTicketer("the gateway's listener secret, at least 32 bytes")
	fmt.Println(relay.Valid(ticket, "chatcmpl-abc", "workerConn1=", "listenerConn="))
	fmt.Println(relay.Valid(ticket, "chatcmpl-abc", "workerConn2=", "listenerConn="))
	// Output:
	// true
	// false
}
