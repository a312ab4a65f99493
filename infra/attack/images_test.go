package attack_test

// Image jobs: a worker's image comes back in parts the gateway reassembles
// under a hard cap. A worker whose parts break the protocol is cut off; one
// whose image is not the PNG asked for, or whose receipt does not hash the
// image, earns nothing and takes strikes; the user is refunded once either
// way. Parts may arrive in any order, as API Gateway delivers them.

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

const (
	imageModel = "img"
	imagePrice = 20
)

// imageEnv is a gateway offering the chat model and an image model.
func imageEnv(t *testing.T) *env {
	return newEnv(t, options{config: func(c *devnet.Config) {
		c.Models = append(c.Models, catalog.Model{ID: imageModel, Price: imagePrice,
			Image: &catalog.ImageSpec{Sizes: []string{"256x192", "1024x1024"}}})
	}})
}

// imageWorker connects a hostile worker registered for the image model
// with the image capability.
func (e *env) imageWorker(acct *account) *hostile {
	e.t.Helper()
	h := e.connectHostile(acct)
	if err := h.send(&relaymsg.Register{Models: []string{imageModel}, Agent: "hostile",
		Caps: []relaymsg.ModelCaps{{Model: imageModel, Image: true}}}); err != nil {
		e.t.Fatal(err)
	}
	select {
	case r := <-h.registered:
		h.conn = r.Conn
	case <-time.After(waitLimit):
		e.t.Fatal("no registered reply")
	}
	return h
}

// nextImageJob waits for the worker's next image job.
func (h *hostile) nextImageJob() *relaymsg.ImageJob {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case b := <-h.other:
			if m, err := relaymsg.Decode(b); err == nil {
				if j, ok := m.(*relaymsg.ImageJob); ok {
					return j
				}
			}
		case <-deadline:
			h.t.Fatal("no image job")
			return nil
		}
	}
}

// imageReceipt is the receipt an honest worker signs for img.
func (h *hostile) imageReceipt(j *relaymsg.ImageJob, img []byte) *relaymsg.Receipt {
	h.t.Helper()
	reqHash, err := relaymsg.ImageRequestHash(&j.Request)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &relaymsg.Receipt{Job: j.Job, Model: j.Model, RequestSHA256: reqHash, OutputSHA256: relaymsg.ImageHash(img), Deltas: 1}
	if err := relaymsg.SignReceipt(h.key, r); err != nil {
		h.t.Fatal(err)
	}
	return r
}

// sendImage sends img's parts in the order given (indexes into the parts),
// then a done with receipt.
func (h *hostile) sendImage(j *relaymsg.ImageJob, img []byte, order []int, receipt *relaymsg.Receipt) {
	h.t.Helper()
	parts, err := relaymsg.SplitImage(img)
	if err != nil {
		h.t.Fatal(err)
	}
	if order == nil {
		for i := range parts {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: int64(i), Ticket: j.Ticket,
			Image: &relaymsg.ImagePart{Parts: int64(len(parts)), Data: parts[i]}}); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := h.send(&relaymsg.Done{Job: j.Job, To: j.ReplyTo, Seq: int64(len(parts)), FinishReason: oaiwire.FinishStop,
		Ticket: j.Ticket, Receipt: receipt}); err != nil {
		h.t.Fatal(err)
	}
}

// noisyPNG is a PNG of w×h that does not compress well: several parts.
func noisyPNG(t *testing.T, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(2463534242)
	for i := range img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = byte(x)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// imageCall posts an image request and returns its status and body.
func (e *env) imageCall(key string, size ...string) (int, []byte) {
	e.t.Helper()
	params := map[string]any{"model": imageModel, "prompt": "a lighthouse", "response_format": "b64_json"}
	if len(size) > 0 {
		params["size"] = size[0]
	}
	body, _ := json.Marshal(params)
	req, _ := http.NewRequest(http.MethodPost, e.stack.APIURL+"/images/generations", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	resp, err := e.http.Do(req.WithContext(ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestImagePartsInAnyOrder(t *testing.T) {
	e := imageEnv(t)
	user, worker := e.newAccount("user", 1000), e.newAccount("worker", 0)
	h := e.imageWorker(worker)
	img := noisyPNG(t, 256, 192)
	type answer struct {
		status int
		body   []byte
	}
	res := make(chan answer, 1)
	go func() { s, b := e.imageCall(user.apiKey); res <- answer{s, b} }()
	j := h.nextImageJob()
	if j.Request.Width != 256 || j.Request.Height != 192 || j.Request.Prompt != "a lighthouse" {
		t.Fatalf("image job request %+v", j.Request)
	}
	parts, _ := relaymsg.SplitImage(img)
	if len(parts) < 2 {
		t.Fatalf("the test image is %d bytes, one part: want several", len(img))
	}
	// Reversed, the done between the parts.
	order := make([]int, 0, len(parts))
	for i := len(parts) - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for _, i := range order[:len(order)-1] {
		if err := h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: int64(i), Ticket: j.Ticket,
			Image: &relaymsg.ImagePart{Parts: int64(len(parts)), Data: parts[i]}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.send(&relaymsg.Done{Job: j.Job, To: j.ReplyTo, Seq: int64(len(parts)), FinishReason: oaiwire.FinishStop,
		Ticket: j.Ticket, Receipt: h.imageReceipt(j, img)}); err != nil {
		t.Fatal(err)
	}
	if err := h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: int64(order[len(order)-1]), Ticket: j.Ticket,
		Image: &relaymsg.ImagePart{Parts: int64(len(parts)), Data: parts[order[len(order)-1]]}}); err != nil {
		t.Fatal(err)
	}
	a := <-res
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var out struct {
		Data []struct {
			B64JSON []byte `json:"b64_json"`
		} `json:"data"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil || len(out.Data) != 1 || !bytes.Equal(out.Data[0].B64JSON, img) {
		t.Fatalf("the reply is not the worker's image (%v)", err)
	}
	e.expectCharged(j.Job)
	e.expectCredits(user, 1000-imagePrice)
	e.expectEarned(worker, imagePrice*workerShare/100)
}

// TestImageCheats: each way of sending a bad image costs the user nothing
// and the worker its pay.
func TestImageCheats(t *testing.T) {
	good := func(t *testing.T) []byte { return noisyPNG(t, 256, 192) }
	for _, tc := range []struct {
		name string
		// play sends the worker's answer to j.
		play func(t *testing.T, h *hostile, j *relaymsg.ImageJob)
		// strikes are the identity's strikes after; cut says the
		// connection is closed.
		strikes int64
		cut     bool
	}{
		{"not a png", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			img := bytes.Repeat([]byte("GIF89a"), 100)
			h.sendImage(j, img, nil, h.imageReceipt(j, img))
		}, 1, false},
		{"wrong size", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			img := noisyPNG(t, 64, 64)
			h.sendImage(j, img, nil, h.imageReceipt(j, img))
		}, 1, false},
		{"truncated png", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			img := good(t)
			img = img[:len(img)/2]
			h.sendImage(j, img, nil, h.imageReceipt(j, img))
		}, 1, false},
		{"receipt of another image", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			img := good(t)
			h.sendImage(j, img, nil, h.imageReceipt(j, noisyPNG(t, 256, 96)))
		}, store.ProofStrikes, true},
		{"duplicate part", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			img := good(t)
			h.sendImage(j, img, []int{0, 0}, h.imageReceipt(j, img))
		}, 0, true},
		{"text in an image job", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			_ = h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: 0, Ticket: j.Ticket, Deltas: []oaiwire.Delta{{Content: "hi"}}})
		}, 0, true},
		{"parts disagree", func(t *testing.T, h *hostile, j *relaymsg.ImageJob) {
			p := bytes.Repeat([]byte{1}, relaymsg.ImagePartBytes)
			_ = h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: 0, Ticket: j.Ticket, Image: &relaymsg.ImagePart{Parts: 3, Data: p}})
			_ = h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: 1, Ticket: j.Ticket, Image: &relaymsg.ImagePart{Parts: 2, Data: p}})
		}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := imageEnv(t)
			user, worker := e.newAccount("user", 1000), e.newAccount("worker", 0)
			h := e.imageWorker(worker)
			res := make(chan int, 1)
			go func() { s, _ := e.imageCall(user.apiKey); res <- s }()
			j := h.nextImageJob()
			tc.play(t, h, j)
			if status := <-res; status == http.StatusOK {
				t.Fatal("a bad image was served")
			}
			e.expectRefunded(j.Job)
			e.expectCredits(user, 1000)
			e.expectEarned(worker, 0)
			if tc.strikes > 0 {
				if rep := e.reputationOf(worker); rep.Strikes != tc.strikes {
					t.Errorf("strikes %d, want %d", rep.Strikes, tc.strikes)
				}
			}
			if tc.cut {
				select {
				case <-h.closed:
				case <-time.After(waitLimit):
					t.Error("the worker's connection is still open")
				}
			}
		})
	}
}

// TestImageOfManyParts: a 1024x1024 image that does not compress (over
// 4 MiB, more than sixty parts) goes through the relay and the listener's
// mailbox whole.
func TestImageOfManyParts(t *testing.T) {
	e := imageEnv(t)
	user, worker := e.newAccount("user", 1000), e.newAccount("worker", 0)
	h := e.imageWorker(worker)
	img := noisyPNG(t, 1024, 1024)
	res := make(chan []byte, 1)
	go func() {
		status, b := e.imageCall(user.apiKey, "1024x1024")
		if status != http.StatusOK {
			t.Errorf("status %d: %.300s", status, b)
		}
		res <- b
	}()
	j := h.nextImageJob()
	h.sendImage(j, img, nil, h.imageReceipt(j, img))
	var out struct {
		Data []struct {
			B64JSON []byte `json:"b64_json"`
		} `json:"data"`
	}
	if err := json.Unmarshal(<-res, &out); err != nil || len(out.Data) != 1 || !bytes.Equal(out.Data[0].B64JSON, img) {
		t.Fatalf("the reply is not the worker's %d-byte image (%v)", len(img), err)
	}
	e.expectCharged(j.Job)
}

// TestSilentImageWorkerIsCutOff: a worker that takes an image job and
// never delivers is cut off once ImageRender has passed, and the job goes
// to another worker: it does not hold image jobs until their deadline.
func TestSilentImageWorkerIsCutOff(t *testing.T) {
	// Long enough for the good worker to answer on a loaded machine (its
	// own timer starts when the job moves to it), short beside the job's
	// 30 s deadline.
	e := newEnv(t, options{limits: func(l *api.Limits) { l.ImageRender = 3 * time.Second }, config: func(c *devnet.Config) {
		c.Models = append(c.Models, catalog.Model{ID: imageModel, Price: imagePrice,
			Image: &catalog.ImageSpec{Sizes: []string{"256x192"}}})
	}})
	user, silent, good := e.newAccount("user", 1000), e.newAccount("silent", 0), e.newAccount("good", 0)
	img := noisyPNG(t, 256, 192)
	hs := e.imageWorker(silent)
	res := make(chan int, 1)
	go func() { s, _ := e.imageCall(user.apiKey); res <- s }()
	j := hs.nextImageJob()
	hg := e.imageWorker(good)
	moved := hg.nextImageJob()
	if moved.Job != j.Job {
		t.Fatalf("the good worker got job %s, want the silent worker's %s", moved.Job, j.Job)
	}
	hg.sendImage(moved, img, nil, hg.imageReceipt(moved, img))
	if status := <-res; status != http.StatusOK {
		t.Fatalf("status %d, want the good worker's image", status)
	}
	if !hs.waitClosed(waitLimit) {
		t.Error("the silent worker is still connected")
	}
	e.expectCharged(j.Job)
	e.expectCredits(user, 1000-imagePrice)
	e.expectEarned(silent, 0)
	e.expectEarned(good, imagePrice*workerShare/100)
}
