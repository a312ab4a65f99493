package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/png" // the images a backend returns are PNG
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// startImage runs an image job: the backend renders it, and the image goes
// back in parts (relaymsg.SplitImage), then a done whose signed receipt
// hashes the image bytes.
func (s *session) startImage(job *relaymsg.ImageJob) {
	name, served := s.getModels()[job.Model]
	imager, renders := s.a.cfg.Backend.(backend.Imager)
	if !served || !renders {
		s.a.cfg.Observer.JobStarted(job.Model)
		s.a.cfg.Observer.JobEnded(job.Model, OutcomeRefused, oaiwire.Usage{})
		_ = s.send(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Code: relaymsg.FailModelNotServed, Ticket: job.Ticket})
		return
	}
	// As for a chat job: it outlives a drain, not the gateway's cancel
	// nor its deadline.
	end := replyEnd(&relaymsg.Job{Deadline: job.Deadline, BudgetMillis: job.BudgetMillis}, time.Now())
	s.goJob(job.Job, end, func(ctx context.Context) { s.runImage(ctx, end, job, name, imager) })
}

// runImage renders one image and sends it. Only metadata is logged: never
// the prompt, never the image.
func (s *session) runImage(ctx context.Context, end time.Time, job *relaymsg.ImageJob, model string, imager backend.Imager) {
	log := s.a.cfg.Log.With("job", job.Job, "model", job.Model)
	started := time.Now()
	obs := s.a.cfg.Observer
	obs.JobStarted(job.Model)
	outcome := OutcomeInternal
	defer func() { obs.JobEnded(job.Model, outcome, oaiwire.Usage{}) }()
	fail := func(seq int64, code, msg string) {
		_ = s.send(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Seq: seq, Code: code, Message: msg, Ticket: job.Ticket})
	}
	defer func() {
		// A backend that panics fails its job, not the daemon.
		if p := recover(); p != nil {
			log.Error("image job panicked", "panic", p)
			fail(0, "internal", "")
		}
	}()
	// The receipt hashes the request as it arrived.
	reqHash, err := relaymsg.ImageRequestHash(&job.Request)
	if err != nil {
		log.Error("image job receipt", "err", err)
		fail(0, "internal", "")
		return
	}
	receipt := relaymsg.Receipt{Job: job.Job, Model: job.Model, RequestSHA256: reqHash}
	if d, ok := s.a.cfg.Backend.(backend.Digester); ok {
		if digest := d.ModelDigest(model); len(digest) <= maxModelDigest {
			receipt.ModelDigest = digest
		}
	}
	genCtx, stopGen := context.WithDeadlineCause(ctx, end, errReplyDeadline)
	defer stopGen()
	lastStep := 0
	progress := func(step, total int) {
		if step > lastStep {
			lastStep = step
			log.Debug("image progress", "step", step, "of", total)
		}
	}
	img, err := imager.Image(genCtx, model, backend.ImageRequest{Prompt: job.Request.Prompt,
		Width: job.Request.Width, Height: job.Request.Height}, progress)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(context.Cause(genCtx), errReplyDeadline):
		// An image half rendered is no image: the job fails in time for
		// the gateway to say so (and refund it).
		log.Warn("image not rendered by the job's deadline", "ms", time.Since(started).Milliseconds())
		outcome = OutcomeFailed
		fail(0, "deadline", "the image was not rendered by the job's deadline")
		return
	case ctx.Err() != nil:
		log.Info("image job stopped", "reason", context.Cause(ctx), "ms", time.Since(started).Milliseconds())
		outcome = OutcomeCancelled
		return
	case err != nil:
		safe := truncate(backend.SafeText(err), 512)
		log.Warn("image job failed", "err", safe)
		outcome = OutcomeFailed
		obs.BackendError(job.Model)
		fail(0, "backend_error", safe)
		return
	}
	if why := checkPNG(img.PNG, job.Request.Width, job.Request.Height); why != "" {
		// Better a failed job than an image the gateway rejects with a
		// strike.
		log.Warn("backend returned an unusable image", "why", why)
		outcome = OutcomeFailed
		obs.BackendError(job.Model)
		fail(0, "backend_error", why)
		return
	}
	parts, err := relaymsg.SplitImage(img.PNG)
	if err != nil {
		log.Warn("backend returned an unusable image", "why", err.Error())
		outcome = OutcomeFailed
		obs.BackendError(job.Model)
		fail(0, "backend_error", err.Error())
		return
	}
	rendered := time.Now()
	obs.FirstToken(job.Model, rendered.Sub(started)) // the image is its first output
	n := int64(len(parts))
	for i, p := range parts {
		if err := s.send(&relaymsg.Chunk{Job: job.Job, To: job.ReplyTo, Seq: int64(i), Ticket: job.Ticket,
			Image: &relaymsg.ImagePart{Parts: n, Data: p}}); err != nil {
			// The connection is dead: the relay tells the gateway, which
			// moves the job.
			log.Warn("image part not sent", "part", i, "err", err)
			outcome = OutcomeCancelled
			return
		}
	}
	receipt.OutputSHA256, receipt.Deltas = relaymsg.ImageHash(img.PNG), 1
	receipt.FirstTokenMillis = clampMillis(rendered.Sub(started))
	receipt.TotalMillis = clampMillis(time.Since(started))
	done := &relaymsg.Done{Job: job.Job, To: job.ReplyTo, Seq: n, FinishReason: oaiwire.FinishStop, Ticket: job.Ticket, Receipt: &receipt}
	if err := relaymsg.SignReceipt(s.a.cfg.Key, &receipt); err != nil {
		log.Error("sign the image job's receipt", "err", err)
		fail(n, "internal", "could not sign the receipt")
		return
	}
	log.Info("image job done", "bytes", len(img.PNG), "parts", n, "ms", time.Since(started).Milliseconds())
	outcome = OutcomeCompleted
	_ = s.send(done)
}

// checkPNG says why img is not a PNG of width×height, or "" if it is: the
// gateway's own check, done first so that a backend's mistake fails the job
// rather than earn the worker a strike.
func checkPNG(img []byte, width, height int) string {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(img))
	switch {
	case err != nil:
		return "the backend's image does not decode: " + err.Error()
	case format != "png":
		return "the backend's image is " + format + ", not png"
	case cfg.Width != width || cfg.Height != height:
		return fmt.Sprintf("the backend's image is %dx%d, not the %dx%d asked for", cfg.Width, cfg.Height, width, height)
	}
	return ""
}
