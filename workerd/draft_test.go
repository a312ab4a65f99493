package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunRingMemberMetrics runs the daemon as a ring member with --draft
// and --metrics: the drafter choice passes the start-up checks, the stage
// listener comes up, and the metrics endpoint serves the member's
// speculation counts (c0mpute_workerd_ring_spec_…, at zero: no ring has
// run) beside the agent's. The relay is unreachable, which the agent
// retries until SIGTERM stops it.
func TestRunRingMemberMetrics(t *testing.T) {
	home := t.TempDir()
	t.Setenv("C0MPUTE_HOME", home)
	t.Setenv("C0MPUTE_WORKER_KEY", "")
	if _, err := capture(t, func() error { return run([]string{"init"}) }); err != nil {
		t.Fatal(err)
	}
	// A free port for --metrics: run takes an address, and says which
	// only in its log.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	done := make(chan error, 1)
	go func() {
		done <- run([]string{"run", "--relay", "ws://127.0.0.1:1/", "--token", "cwt_main", "--log-level", "error",
			"--backend", "builtin", "--shard", "--shard-memory", "1Gi", "--shard-listen", "127.0.0.1:0",
			"--shard-advertise", "127.0.0.1:7420", "--draft", "none,tiny=lookup", "--metrics", addr})
	}()
	var body string
	deadline := time.Now().Add(15 * time.Second)
	for body == "" {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the metrics endpoint to serve the speculation counts")
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// The endpoint is up before the member is made: wait for
			// the member's counts.
			if strings.Contains(string(b), "c0mpute_workerd_ring_spec_loops_total") {
				body = string(b)
			}
		}
		if body == "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, line := range []string{
		`c0mpute_workerd_ring_spec_loops_total{gamma="0"} 0`,
		`c0mpute_workerd_ring_spec_loops_total{gamma="16"} 0`,
		"c0mpute_workerd_ring_spec_drafted_tokens_total 0",
		"c0mpute_workerd_ring_spec_accepted_tokens_total 0",
		"c0mpute_workerd_ring_spec_rejections_total 0",
		"c0mpute_workerd_ring_spec_loop_seconds_total 0",
		"c0mpute_workerd_ring_spec_draft_seconds_total 0",
		"c0mpute_workerd_busy_seconds_total 0",
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	// The signal context run set up is in place: it was made before the
	// metrics endpoint, which answered.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop on SIGTERM")
	}
}
