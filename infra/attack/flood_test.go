package attack_test

// Finding 6 (memory exhaustion through the listener) and the relay's own
// flood limits: frames over 128 KB, heartbeats and garbage.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

const (
	floodChunks    = 800
	floodChunkSize = 100_000
)

// longWait: only a bound on what is held back ends these jobs, not a
// deadline.
func longWait(l *api.Limits) {
	l.FirstToken = 20 * time.Second
	l.Job = 40 * time.Second
	l.QueueWait = 2 * time.Second
}

// heapInUse is the test process's heap in use, in MB: the API and the
// relay run in it. Information only: never asserted.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse >> 20
}

// flood sends chunks of the job with seqs from first on, floodChunkSize
// bytes each, until count are sent or the connection closes; it returns how
// many went.
func flood(h *hostile, j *relaymsg.Job, first int64, count int) int {
	big := strings.Repeat("x", floodChunkSize)
	sent := 0
	for seq := first; sent < count && !h.isClosed(); seq++ {
		if h.chunk(j, seq, big) != nil {
			break
		}
		sent++
	}
	return sent
}

// TestFloodOutOfOrder is finding 6, first half: a worker holds back seq 0
// and sends 800 chunks of 100 KB after it. Before, the API kept every one
// (80 MB for one job, unbounded). Now, once a bound is passed, the job
// ends (moved or failed, refunded once) and the worker is cut off, unpaid.
func TestFloodOutOfOrder(t *testing.T) {
	e := newEnv(t, options{limits: longWait})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	before := heapInUse()
	c := e.start(user.apiKey, chatBody("flood me", true))
	j := h.nextJob()
	start := time.Now()
	sent := flood(h, j, 1, floodChunks)
	elapsed := time.Since(start)
	after := heapInUse()
	cutOff := h.waitClosed(10 * time.Second)
	t.Logf("sent %d chunks of %d KB out of order in %s; API heap in use %d MB before, %d MB after the flood, %d MB at the end",
		sent, floodChunkSize/1000, elapsed.Round(time.Millisecond), before, after, heapInUse())
	if !cutOff {
		t.Errorf("the worker was not cut off after %d out-of-order chunks (%d MB held back)", sent, sent*floodChunkSize>>20)
		h.ws.CloseNow() // end the job the old way, to finish the test
	}
	r := c.wait(t)
	job := e.settled(j.Job)
	if r.ok() {
		t.Errorf("the flooded job completed: %s", r)
	}
	if job.State != "failed" || !job.Refunded {
		t.Errorf("job: state %s, refunded %v; want failed and refunded", job.State, job.Refunded)
	}
	e.expectCredits(user, 1000)
	e.expectEarned(mallory, 0)
}

// TestFloodFasterThanClientReads is finding 6, second half: a worker sends
// its chunks in order, 100 KB each, far faster than the client reads.
// Before, the API queued everything the client had not read yet. Now, once
// a bound is passed, the job ends with an error for the client and a
// refund, and the worker is cut off, unpaid.
//
// The client reads an event every half second, with a small receive
// buffer so the kernel holds little for it, until the worker is floodAhead
// chunks ahead of it (more than any bound should let the API hold); then
// it reads at full speed, so that whatever the API queued behind the bound
// drains and the job's end shows.
func TestFloodFasterThanClientReads(t *testing.T) {
	const floodAhead = 150 // chunks, 15 MB
	e := newEnv(t, options{limits: longWait})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	before := heapInUse()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.stack.APIURL+"/chat/completions", bytes.NewReader(chatBody("flood me", true)))
	req.Header.Set("Authorization", "Bearer "+user.apiKey)
	slowConn := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
		return errors.Join(err, serr)
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: slowConn.DialContext}}
	type readResult struct {
		errorEvents int
		done        bool
		err         error
	}
	var fast atomic.Bool
	var events atomic.Int64
	read := make(chan readResult, 1)
	go func() {
		var res readResult
		defer func() { read <- res }()
		resp, err := client.Do(req)
		if err != nil {
			res.err = err
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReaderSize(resp.Body, 256<<10)
		for {
			line, err := br.ReadSlice('\n')
			for err == bufio.ErrBufferFull { // a long event: skip the rest of it
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				res.err = err
				return
			}
			switch {
			case bytes.HasPrefix(line, []byte(`data: {"error"`)):
				res.errorEvents++
			case bytes.HasPrefix(line, []byte("data: [DONE]")):
				res.done = true
			case bytes.HasPrefix(line, []byte("data: ")):
				events.Add(1)
				if !fast.Load() {
					time.Sleep(500 * time.Millisecond) // a slow client
				}
			}
		}
	}()
	j := h.nextJob()
	big := strings.Repeat("x", floodChunkSize)
	start := time.Now()
	sent := 0
	var atSwitch uint64
	for seq := int64(0); sent < floodChunks && !h.isClosed(); seq++ {
		if h.chunk(j, seq, big) != nil {
			break
		}
		sent++
		if int64(sent)-events.Load() >= floodAhead && !fast.Load() {
			atSwitch = heapInUse()
			fast.Store(true)
		}
	}
	elapsed := time.Since(start)
	if !fast.Load() {
		atSwitch = heapInUse()
		fast.Store(true)
	}
	cutOff := h.waitClosed(10 * time.Second)
	ended := poll(10*time.Second, func() bool {
		jb, err := e.store.GetJob(context.Background(), j.Job)
		return err == nil && (jb.State == "failed" || jb.State == "done")
	})
	t.Logf("sent %d chunks of %d KB in order in %s (%.1f MB/s); API heap in use %d MB before, %d MB when the client sped up, %d MB at the end",
		sent, floodChunkSize/1000, elapsed.Round(time.Millisecond),
		float64(sent*floodChunkSize)/1e6/max(elapsed.Seconds(), 1e-3), before, atSwitch, heapInUse())
	if !cutOff || !ended {
		t.Errorf("after %d chunks (%d MB) the worker is cut off: %v, the job ended: %v; want both", sent, sent*floodChunkSize>>20, cutOff, ended)
		cancel()
	}
	var res readResult
	select {
	case res = <-read:
	case <-time.After(waitLimit):
		cancel()
		res = <-read
	}
	t.Logf("client read %d events, %d error events, [DONE] %v, end: %v", events.Load(), res.errorEvents, res.done, res.err)
	if cutOff && ended && (res.errorEvents != 1 || res.done) {
		t.Errorf("client: %d error events, [DONE] %v; want one error event and no [DONE]", res.errorEvents, res.done)
	}
	job := e.settled(j.Job)
	if job.State != "failed" || !job.Refunded {
		t.Errorf("job: state %s, refunded %v; want failed and refunded", job.State, job.Refunded)
	}
	e.expectCredits(user, 1000)
	e.expectEarned(mallory, 0)
}

// TestOversizedFrame: a frame over 128 KB closes the sender's connection
// (1009, as API Gateway does), and the gateway serves on.
func TestOversizedFrame(t *testing.T) {
	e := newEnv(t, options{})
	user, mallory, honestAcct := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	h := e.hostileWorker(mallory)
	frame := rawChunk("chatcmpl-x", "nobody", 0, strings.Repeat("a", 200<<10), forgedTicket())
	if err := h.sendRaw(frame); err != nil {
		t.Logf("send: %v", err)
	}
	if !h.waitClosed(10 * time.Second) {
		t.Fatalf("a %d-byte frame did not close the connection", len(frame))
	}
	if got := h.closeStatus(); got != websocket.StatusMessageTooBig {
		t.Errorf("close status %v; want %v", got, websocket.StatusMessageTooBig)
	}
	e.honestWorker(honestAcct, words("fine"))
	if r := e.chat(user.apiKey, chatBody("still there?", true)); !r.ok() {
		t.Errorf("after the oversized frame: %s", r)
	}
}

// TestHeartbeatAndGarbageFlood: a connection floods the relay with
// heartbeats, malformed JSON, unknown types, wrong versions and binary
// frames while users are served. Every request succeeds and is charged
// once; the flooder gets error replies (or is cut off), never a crash.
func TestHeartbeatAndGarbageFlood(t *testing.T) {
	e := newEnv(t, options{})
	user, mallory, honestAcct := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	e.honestWorker(honestAcct, words("Hello", " world"))
	h := e.connectHostile(mallory) // not registered: it gets no job
	hb, _ := relaymsg.Encode(&relaymsg.Heartbeat{})
	garbage := [][]byte{hb, []byte("{"), []byte("null"), []byte("[]"), []byte(`{"v":1,"type":"nope"}`),
		[]byte(`{"v":2,"type":"heartbeat"}`), []byte(`{"v":1,"type":"chunk"}`), []byte(`{"v":1,"type":"register","models":[]}`),
		[]byte(`{"v":1,"type":"heartbeat"}{"v":1}`), bytes.Repeat([]byte("["), 10_000)}
	binary := make([]byte, 512)
	_, _ = rand.Read(binary)
	stop := make(chan struct{})
	flooded := make(chan int)
	go func() {
		n := 0
		defer func() { flooded <- n }()
		for n < 20_000 {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if n%len(garbage) == 3 {
				err = h.sendFrame(websocket.MessageBinary, binary)
			} else {
				err = h.sendRaw(garbage[n%len(garbage)])
			}
			if err != nil {
				return
			}
			n++
		}
	}()
	const requests = 10
	for i := range requests {
		if r := e.chat(user.apiKey, chatBody("during the flood", i%2 == 0)); !r.ok() || r.Content != "Hello world" {
			t.Errorf("request %d during the flood: %s", i, r)
		}
	}
	close(stop)
	n := <-flooded
	t.Logf("flooded %d messages; %d error replies; cut off %v (%v)", n, len(h.drainErrors()), h.isClosed(), h.err())
	e.expectCredits(user, 1000-requests*price)
	e.expectEarned(honestAcct, requests*earning)
}
