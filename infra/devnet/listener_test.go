package devnet_test

import (
	"context"
	"testing"
	"time"
)

// TestListenerCheck drops the API's relay connection behind its back, as
// API Gateway does to a frozen Lambda instance's idle connection, and checks
// that Check brings up a new one before the next request needs it.
func TestListenerCheck(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	ctx := context.Background()
	lis := e.stack.Listener()

	before, err := lis.Conn()
	if err != nil {
		t.Fatal(err)
	}
	if err := lis.Check(ctx); err != nil {
		t.Fatalf("Check on a live connection: %v", err)
	}
	if now, _ := lis.Conn(); now != before {
		t.Fatalf("a live connection was replaced: %s → %s", before, now)
	}

	if err := e.stack.Conns.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := lis.Check(ctx); err != nil {
			t.Fatalf("Check after the drop: %v", err)
		}
		if now, err := lis.Conn(); err == nil && now != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped connection was not replaced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.client.Chat.Completions.New(ctx, chatParams("hello world", 4)); err != nil {
		t.Fatalf("request after reconnect: %v", err)
	}
}
