package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// errReceiptRejected ends a reply whose worker's receipt did not check out.
var errReceiptRejected = &oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer, Code: "receipt_rejected",
	Message: "The worker's signed receipt did not match the reply, so the reply was rejected and the worker disconnected. The request was not charged."}

// checkReceipt says why a done's receipt is not acceptable, or "" if it
// is: it must be signed by the identity the store recorded for the job's
// worker at Assign, name this job and model, and carry the hash of the
// request this gateway sent and the hash and count of the deltas it relayed
// from that worker. Nothing here reads the store on the hot path; the
// reason is a short fixed text, for the log.
func (j *jobRun) checkReceipt(m *relaymsg.Done) string {
	if why := j.checkSigned(m.Receipt); why != "" {
		return why
	}
	r := m.Receipt
	if h, err := j.reqHash(); err != nil || r.RequestSHA256 != h {
		return "request hash is not the request's"
	}
	if r.Deltas != j.output.Deltas() || r.OutputSHA256 != j.output.Sum() {
		return "output hash or delta count is not the relayed reply's"
	}
	return ""
}

// checkSigned says why a receipt is not one of this job, signed by its
// worker, or "" if it is: what every receipt must be, whatever its job
// made.
func (j *jobRun) checkSigned(r *relaymsg.Receipt) string {
	switch {
	case r == nil:
		return "no receipt"
	case r.Job != j.job.ID:
		return "receipt of another job"
	case r.Model != j.model.ID:
		return "receipt of another model"
	}
	pub := j.workerPubkey
	if pub == "" {
		pub = j.lookupPubkey()
	}
	switch {
	case pub == "":
		return "the worker's identity is unknown"
	case r.Worker != pub:
		return "receipt signed by another identity"
	}
	if err := relaymsg.VerifyReceipt(r); err != nil {
		return err.Error()
	}
	return ""
}

// lookupPubkey reads the worker's identity from the job, for an assignment
// learned without it (an old relay's Assign message): off the hot path.
func (j *jobRun) lookupPubkey() string {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	cur, err := j.s.store.GetJob(ctx, j.job.ID)
	if err != nil || cur.Worker != j.worker {
		return ""
	}
	j.workerPubkey = cur.WorkerPubkey
	return cur.WorkerPubkey
}

// reqHash is the receipt hash of the request this gateway sends, computed
// once per job.
func (j *jobRun) reqHash() (string, error) {
	if j.requestHash == "" {
		h, err := relaymsg.RequestHash(j.req)
		if err != nil {
			return "", err
		}
		j.requestHash = h
	}
	return j.requestHash, nil
}

// rejectReceipt ends a job whose done came without a valid receipt. It is
// an anti-cheat rejection: the worker earns nothing and is cut off, the
// job is refunded once, and the client, who may have the text already,
// gets an error instead of the reply's end (a 502 when nothing was sent).
// The identity takes ProofStrikes.
// The work is not moved: it was done, and not proven.
func (j *jobRun) rejectReceipt(clientCtx context.Context, why string) (outcome, bool, error) {
	lost := j.worker
	j.s.log.Warn("receipt rejected; cutting the worker off", "job", j.job.ID, "worker", lost, "why", why)
	kind := store.VerdictRejected
	if j.job.Canary {
		kind = store.VerdictCanaryFailed
	}
	// Work its own receipt does not vouch for weighs as a forgery: the
	// identity goes to quarantine at once, and is cut off besides.
	j.s.Judge(store.Verdict{JobID: j.job.ID, Conn: lost, Pubkey: j.workerPubkey, Kind: kind,
		Strikes: store.ProofStrikes, Reason: "receipt_rejected", At: j.s.now()})
	j.dropWorker(lost, true)
	j.worker = "" // cut off: nothing to cancel
	return outcomeFailed, true, j.end(clientCtx, "receipt_rejected", errReceiptRejected)
}

// storeReceipt is the record of a verified receipt.
func storeReceipt(r *relaymsg.Receipt) *store.Receipt {
	if r == nil {
		return nil
	}
	return &store.Receipt{JobID: r.Job, WorkerPubkey: r.Worker, Model: r.Model, ModelDigest: r.ModelDigest,
		RequestSHA256: r.RequestSHA256, OutputSHA256: r.OutputSHA256, Deltas: r.Deltas,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		FirstTokenMillis: r.FirstTokenMillis, TotalMillis: r.TotalMillis, Signature: r.Signature}
}

// receipt serves GET /v1/receipts/{id}: the worker's signed receipt of one
// of the caller's account's completed jobs, exactly as the worker signed
// it, so it can be verified offline with the worker's pubkey alone. The
// id is the completion id. Any other job, or one without a receipt, is
// 404: nobody learns whether another account's job exists.
func (s *Server) receipt(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	rc, err := s.store.GetReceipt(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && rc.AccountID != who(r).account:
		return notFound("receipt", id)
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, relaymsg.Receipt{Job: rc.JobID, Worker: rc.WorkerPubkey, Model: rc.Model,
		ModelDigest: rc.ModelDigest, RequestSHA256: rc.RequestSHA256, OutputSHA256: rc.OutputSHA256,
		Deltas: rc.Deltas, PromptTokens: rc.PromptTokens, CompletionTokens: rc.CompletionTokens,
		FirstTokenMillis: rc.FirstTokenMillis, TotalMillis: rc.TotalMillis, Signature: rc.Signature})
}
