package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// imageRequest is the body of POST /v1/images/generations, every field
// OpenAI's API defines. The network renders one PNG per request and returns
// it inline: a field asking for anything else is refused by name rather
// than ignored, except those that only concern OpenAI's own service (user,
// safety_identifier and moderation), which are accepted and dropped.
type imageRequest struct {
	Model             string  `json:"model"`
	Prompt            *string `json:"prompt"`
	N                 *int64  `json:"n"`
	Size              *string `json:"size"`
	ResponseFormat    *string `json:"response_format"`
	Quality           *string `json:"quality"`
	Style             *string `json:"style"`
	Background        *string `json:"background"`
	OutputFormat      *string `json:"output_format"`
	OutputCompression *int64  `json:"output_compression"`
	Moderation        *string `json:"moderation"`
	Stream            *bool   `json:"stream"`
	PartialImages     *int64  `json:"partial_images"`
	FrameCount        *int64  `json:"frame_count"`
	FrameDurationMs   *int64  `json:"frame_duration_ms"`
	Complexity        *string `json:"complexity"`
	// User and SafetyIdentifier name the end user to OpenAI; a worker is
	// a stranger and must not learn who asked, so they go nowhere.
	User             *string `json:"user"`
	SafetyIdentifier *string `json:"safety_identifier"`
}

// maxImageBody bounds an image request's body: a prompt of
// relaymsg.MaxImagePrompt bytes, every byte escaped, and the other fields.
const maxImageBody = 6*relaymsg.MaxImagePrompt + 4096

// decodeImageRequest reads and decodes an image request's body.
func decodeImageRequest(body io.Reader) (*imageRequest, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxImageBody+1))
	if err != nil {
		return nil, oaiwire.InvalidRequest("", "could not read the request body: "+err.Error())
	}
	if len(raw) > maxImageBody {
		return nil, &oaiwire.Error{Status: http.StatusRequestEntityTooLarge, Type: oaiwire.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body larger than %d bytes", maxImageBody)}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, oaiwire.InvalidRequest("", "request body is empty; send a JSON object")
	}
	if !utf8.Valid(raw) {
		return nil, oaiwire.InvalidRequest("", "request body is not valid UTF-8")
	}
	var req imageRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ):
			return nil, oaiwire.InvalidRequest(typ.Field, fmt.Sprintf("%s must not be a JSON %s", typ.Field, typ.Value))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return nil, oaiwire.InvalidRequest(field, fmt.Sprintf("unknown parameter %q for /v1/images/generations", field))
		}
		return nil, oaiwire.InvalidRequest("", "request body is not a valid JSON object: "+err.Error())
	}
	if dec.More() {
		return nil, oaiwire.InvalidRequest("", "request body has data after the JSON object")
	}
	return &req, nil
}

// imageJobRequest checks an image request against the image model it names
// and returns what the worker is sent: the prompt and the pixel size.
func imageJobRequest(req *imageRequest, spec *catalog.ImageSpec) (relaymsg.ImageRequest, error) {
	bad := oaiwire.InvalidRequest
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	prompt := str(req.Prompt)
	switch {
	case strings.TrimSpace(prompt) == "":
		return relaymsg.ImageRequest{}, bad("prompt", "prompt is required: describe the image to generate")
	case len(prompt) > relaymsg.MaxImagePrompt:
		return relaymsg.ImageRequest{}, bad("prompt", fmt.Sprintf("prompt is %d bytes; the limit is %d", len(prompt), relaymsg.MaxImagePrompt))
	case req.N != nil && *req.N != 1:
		return relaymsg.ImageRequest{}, bad("n", "n must be 1: this network renders one image per request (send several requests for more)")
	case str(req.ResponseFormat) != "" && str(req.ResponseFormat) != "b64_json":
		return relaymsg.ImageRequest{}, bad("response_format", "response_format must be b64_json: images are returned inline and never stored, so there is no URL to give")
	case !oneOf(str(req.Quality), "", "auto", "standard"):
		return relaymsg.ImageRequest{}, bad("quality", "quality must be auto or standard: the network's image models render at one quality")
	case req.Style != nil:
		return relaymsg.ImageRequest{}, bad("style", "style is a DALL·E 3 setting the network's image models do not have; describe the style in the prompt")
	case !oneOf(str(req.Background), "", "auto", "opaque"):
		return relaymsg.ImageRequest{}, bad("background", "background must be auto or opaque: images are rendered without transparency")
	case !oneOf(str(req.OutputFormat), "", "png"):
		return relaymsg.ImageRequest{}, bad("output_format", "output_format must be png")
	case req.OutputCompression != nil:
		return relaymsg.ImageRequest{}, bad("output_compression", "output_compression applies to jpeg and webp; images are png")
	case req.Stream != nil && *req.Stream:
		return relaymsg.ImageRequest{}, bad("stream", "stream must be false: the image is returned whole")
	case req.PartialImages != nil && *req.PartialImages != 0:
		return relaymsg.ImageRequest{}, bad("partial_images", "partial_images must be 0: the image is returned whole")
	case req.FrameCount != nil || req.FrameDurationMs != nil:
		return relaymsg.ImageRequest{}, bad("frame_count", "animated images are not offered")
	case req.Complexity != nil:
		return relaymsg.ImageRequest{}, bad("complexity", "complexity is not a setting of the network's image models")
	case !oneOf(str(req.Moderation), "", "auto", "low"):
		return relaymsg.ImageRequest{}, bad("moderation", "moderation must be auto or low")
	}
	size := str(req.Size)
	if size == "" || size == "auto" {
		size = spec.DefaultSize()
	}
	if !oneOf(size, spec.Sizes...) {
		return relaymsg.ImageRequest{}, bad("size", fmt.Sprintf("size %q is not offered by this model; the sizes are %s (default %s)",
			size, strings.Join(spec.Sizes, ", "), spec.DefaultSize()))
	}
	width, height, err := catalog.ParseSize(size)
	if err != nil { // the catalogue checked its sizes: not the client's fault
		return relaymsg.ImageRequest{}, fmt.Errorf("catalogue size: %w", err)
	}
	return relaymsg.ImageRequest{Prompt: prompt, Width: width, Height: height}, nil
}

func oneOf(v string, allowed ...string) bool { return slices.Contains(allowed, v) }

// images serves POST /v1/images/generations: validate, admit at the image
// model's price (rate limit and debit in one store write), dispatch to a
// worker that renders the model's images, relay the prompt to it in memory,
// reassemble the image from its parts, check it and the worker's receipt,
// settle and answer with the image inline. Nothing of the prompt or the
// image is logged, counted or stored.
func (s *Server) images(w http.ResponseWriter, r *http.Request) error {
	rm := metricsOf(r.Context())
	rm.setModel(otherDim)
	body, err := decodeImageRequest(r.Body)
	if err != nil {
		return err
	}
	if body.Model == "" {
		return oaiwire.InvalidRequest("model", "model is required: name one of the image models GET /v1/models lists")
	}
	model, ok := s.catalog.Resolve(body.Model)
	if !ok {
		return oaiwire.ModelNotFound(body.Model)
	}
	rm.setModel(model.ID)
	if model.Image == nil {
		return oaiwire.InvalidRequest("model", model.ID+" is a chat model: use POST /v1/chat/completions, or name an image model")
	}
	req, err := imageJobRequest(body, model.Image)
	if err != nil {
		return err
	}
	// As for chat: the request lives as long as its job may.
	rc := http.NewResponseController(w)
	lifetime := time.Now().Add(s.limits.Job + deadlineGrace + time.Minute)
	_ = rc.SetReadDeadline(lifetime)
	_ = rc.SetWriteDeadline(lifetime)
	needs := store.Needs{Image: true}
	if why, _ := s.unservable(r.Context(), model.ID, needs); why != "" {
		return oaiwire.InvalidRequest("model", "no worker online for "+model.ID+" renders images. The request was not charged.")
	}
	if e := s.unavailable(r, model.ID); e != nil {
		return e
	}
	id := newImageID()
	if !relayable(id, model.ID, req) {
		return errImageTooLarge
	}
	job, box, err := s.admit(w, r, id, model, needs)
	if err != nil {
		return err
	}
	defer box.Close()
	w = s.withBalance(w, who(r).account)
	run := &imageRun{jobRun: &jobRun{s: s, job: job, model: model, box: box, out: imageSink{}, rm: rm}, req: req, w: w}
	run.takeAdmitted()
	return run.serve(r.Context())
}

// relayable says whether the image job id of model for req fits in one
// relay message, as its worker's will be (the longest connection ids, a
// ticket), so that a prompt that cannot is refused before it is charged.
func relayable(id, model string, req relaymsg.ImageRequest) bool {
	longest := strings.Repeat("c", 128)
	_, err := relaymsg.Encode(&relaymsg.ImageJob{Job: id, ReplyTo: longest, Model: model, Request: req,
		Deadline: time.Now(), BudgetMillis: math.MaxInt64, Ticket: strings.Repeat("t", 43)})
	return err == nil
}

// newImageID makes an image job's id.
func newImageID() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return "img-" + base64.RawURLEncoding.EncodeToString(b)
}

// imageSink is an image job's sink: nothing reaches the client before the
// whole image has passed its checks, so a job can always move to another
// worker, and an error is always a real HTTP status.
type imageSink struct{}

func (imageSink) keepAlive()                         {}
func (imageSink) delta(oaiwire.Delta) error          { return nil }
func (imageSink) push() error                        { return nil }
func (imageSink) finish(string, oaiwire.Usage) error { return nil }
func (imageSink) fail(err error) error               { return err }
func (imageSink) committed() bool                    { return false }
func (imageSink) reset()                             {}

// imageRun is an image request's life after admission: a jobRun (its
// worker, exclusions, retries and settlement are chat's) whose reply is an
// image in parts rather than a stream of deltas.
type imageRun struct {
	*jobRun
	req relaymsg.ImageRequest
	w   http.ResponseWriter
	// parts collects the current worker's image; done is its done when it
	// came before the last part (the relay does not keep order).
	parts relaymsg.ImageAssembler
	done  *relaymsg.Done
}

// imageStrikes is what an image that is not the PNG asked for weighs: not
// something a request can ask for, but a backend can misfire once, so it
// takes three such images to quarantine a worker.
const imageStrikes = 1

// errImageTooLarge refuses a prompt that cannot fit in one relay message.
var errImageTooLarge = oaiwire.InvalidRequest("prompt", "the prompt is too large to relay to a worker once encoded (limit 128 KiB)")

func (ir *imageRun) serve(ctx context.Context) error {
	return ir.attempt(ctx, ir.runOnWorker, func() error { return oaiwire.ErrWorkerLost })
}

// runOnWorker hands the prompt to the worker and collects its image. There
// is no first-token timer: an image arrives whole after it is rendered,
// which takes a GPU seconds to minutes. A worker that has not delivered it
// within Limits.ImageRender is cut off (a silent worker would otherwise
// hold every image job it is given until the deadline), and the job moves.
func (ir *imageRun) runOnWorker(jobCtx, clientCtx context.Context) (outcome, error) {
	j := ir.jobRun
	s := j.s
	deadline := j.job.Created.Add(s.limits.Job)
	msg, err := relaymsg.Encode(&relaymsg.ImageJob{Job: j.job.ID, ReplyTo: j.job.Listener, Model: j.model.ID,
		Request: ir.req, Deadline: deadline, BudgetMillis: max(deadline.Sub(s.now()).Milliseconds(), 0),
		Ticket: s.tickets.Issue(j.job.ID, j.worker, j.job.Listener)})
	if err != nil {
		return outcomeFailed, j.end(clientCtx, "too_large", errImageTooLarge)
	}
	if posted, res, err := j.post(jobCtx, clientCtx, msg); !posted {
		return res, err
	}
	j.firstAt = time.Time{}
	ir.parts, ir.done = relaymsg.ImageAssembler{}, nil
	var rendered <-chan time.Time
	if s.limits.ImageRender > 0 {
		t := time.NewTimer(s.limits.ImageRender)
		defer t.Stop()
		rendered = t.C
	}
	for {
		for m, ok := j.box.Pop(); ok; m, ok = j.box.Pop() {
			switch m := m.(type) {
			case error:
				if errors.Is(m, listener.ErrOverflow) {
					// Nothing is written to the client until the image is
					// whole: only the worker can have piled up more than a
					// mailbox holds.
					res, _, err := j.brokeProtocol(clientCtx, "a flood of messages")
					return res, err
				}
				return outcomeFailed, j.end(clientCtx, "listener_lost", oaiwire.ErrInternal)
			case *relaymsg.Lost:
				if m.Worker == j.worker {
					return j.retry(clientCtx)
				}
			case *relaymsg.Chunk, *relaymsg.Done, *relaymsg.Fail:
				if from, _, _ := relaymsg.Sender(m); from != j.worker {
					continue
				}
				if res, done, err := ir.apply(clientCtx, m); done {
					return res, err
				}
			}
		}
		select {
		case <-j.box.Ready():
		case <-rendered:
			return j.cutSilent(clientCtx, "no image in time")
		case <-jobCtx.Done():
			return outcomeFailed, j.end(clientCtx, "timeout", oaiwire.ErrTimeout)
		}
	}
}

// apply takes one message of the current worker's reply.
func (ir *imageRun) apply(clientCtx context.Context, m any) (outcome, bool, error) {
	j := ir.jobRun
	switch m := m.(type) {
	case *relaymsg.Chunk:
		if m.Image == nil {
			return j.brokeProtocol(clientCtx, "text in an image job's reply")
		}
		if err := ir.parts.Add(m.Seq, m.Image); err != nil {
			return j.brokeProtocol(clientCtx, err.Error())
		}
		if j.firstAt.IsZero() {
			j.firstAt = j.s.now()
			j.rm.firstToken(j.firstAt)
		}
		if ir.done != nil && ir.parts.Complete() {
			return ir.finish(clientCtx, ir.done)
		}
		return 0, false, nil
	case *relaymsg.Done:
		if ir.done != nil {
			return j.brokeProtocol(clientCtx, "a second done")
		}
		if !ir.parts.Complete() {
			ir.done = m // the last parts are still on their way
			return 0, false, nil
		}
		return ir.finish(clientCtx, m)
	case *relaymsg.Fail:
		// As for chat: nothing reached the client, so the job moves to
		// another idle worker if there is one, else it ends refunded.
		return j.apply(clientCtx, m)
	}
	return 0, false, nil
}

// finish checks a complete reply, settles the job and answers the client.
func (ir *imageRun) finish(clientCtx context.Context, m *relaymsg.Done) (outcome, bool, error) {
	j := ir.jobRun
	if m.Seq != ir.parts.Parts() {
		return j.brokeProtocol(clientCtx, "a done out of sequence")
	}
	img, err := ir.parts.Image()
	if err != nil {
		return j.brokeProtocol(clientCtx, err.Error())
	}
	if why := ir.checkReceipt(m, img); why != "" {
		return j.rejectReceipt(clientCtx, why)
	}
	if why := checkImage(img, ir.req.Width, ir.req.Height); why != "" {
		return j.rejectWork(clientCtx, why, imageStrikes)
	}
	usage, err := j.complete(m)
	if errors.Is(err, store.ErrNotActive) {
		return j.refuseWork(clientCtx)
	}
	j.rm.completed(usage)
	resp := imagesResponse{Created: j.job.Created.Unix(), Data: []imageData{{B64JSON: base64.StdEncoding.EncodeToString(img)}},
		Size: fmt.Sprintf("%dx%d", ir.req.Width, ir.req.Height), OutputFormat: "png"}
	if err := writeJSON(ir.w, http.StatusOK, resp); err != nil {
		// Charged: the job was done and settled; the client left.
		j.s.log.Info("image reply not delivered", "job", j.job.ID, "err", err)
	}
	return outcomeDone, true, nil
}

// imagesResponse is OpenAI's ImagesResponse for one inline PNG.
type imagesResponse struct {
	Created      int64       `json:"created"`
	Data         []imageData `json:"data"`
	Size         string      `json:"size"`
	OutputFormat string      `json:"output_format"`
}

type imageData struct {
	B64JSON string `json:"b64_json"`
}

// checkImage says why an image is not what was asked for — a PNG of
// width×height that decodes whole — or "" if it is.
func checkImage(img []byte, width, height int) string {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(img))
	switch {
	case err != nil:
		return "image_undecodable"
	case format != "png":
		return "image_not_png"
	case cfg.Width != width || cfg.Height != height:
		return "image_wrong_size"
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		return "image_undecodable"
	}
	return ""
}

// checkReceipt is jobRun.checkReceipt for an image: the receipt must be
// signed by the identity the store recorded for the worker, name this job
// and model, and carry the hash of the image request the gateway sent and
// of the image bytes it reassembled.
func (ir *imageRun) checkReceipt(m *relaymsg.Done, img []byte) string {
	if why := ir.checkSigned(m.Receipt); why != "" {
		return why
	}
	r := m.Receipt
	if h, err := relaymsg.ImageRequestHash(&ir.req); err != nil || r.RequestSHA256 != h {
		return "request hash is not the request's"
	}
	if r.Deltas != 1 || r.OutputSHA256 != relaymsg.ImageHash(img) {
		return "output hash is not the image's"
	}
	return ""
}
