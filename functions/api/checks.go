package api

import (
	"context"
	"errors"
	"hash/maphash"
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// The continuous checks look at what the gateway relayed of a reply as it
// passes, in memory, and keep only counts: no text is kept past the delta
// being relayed, and nothing is logged but the check's name.

// Coherence thresholds. Each is far from what an honest model writes for
// an ordinary request (a reply is judged only past a minimum size, where
// chance cannot produce it); since a request can ask for such a reply, a
// reply past one makes its worker a suspect (a canary at once), nothing
// more.
const (
	// A reply with at least minRunesReplacement runes, a quarter of them
	// U+FFFD, is broken bytes rather than text.
	minRunesReplacement = 16
	// A reply of at least minRunesDominant non-space runes, more than
	// dominantPercent of them one character, is not text.
	minRunesDominant = 64
	dominantPercent  = 60
	// A reply of at least minWordsDiversity words with fewer than one
	// distinct word in diversityRatio is a handful of words repeated.
	minWordsDiversity = 100
	diversityRatio    = 20
	// maxDistinct bounds the distinct runes and words a reply's counts
	// hold: past it, a reply is diverse enough for any check.
	maxDistinct = 4096
)

// replyStats counts what a reply's text is made of.
type replyStats struct {
	runes, nonSpace, replacement int64
	// ascii and byRune count each non-space rune (ASCII in an array: it
	// is most of most replies); top is the largest count.
	ascii  [utf8.RuneSelf]int64
	byRune map[rune]int64
	top    int64
	// words counts words (runs of letters and digits); distinct is the
	// set of their hashes, inWord the hash of the word being read.
	words    int64
	distinct map[uint64]struct{}
	word     maphash.Hash
	inWord   bool
}

var wordSeed = maphash.MakeSeed()

// add counts one delta's text.
func (r *replyStats) add(d oaiwire.Delta) {
	r.text(d.Reasoning)
	r.text(d.Content)
}

func (r *replyStats) text(s string) {
	if r.byRune == nil {
		r.byRune, r.distinct = map[rune]int64{}, map[uint64]struct{}{}
		r.word.SetSeed(wordSeed)
	}
	for _, c := range s {
		r.runes++
		if c == utf8.RuneError {
			r.replacement++
		}
		if unicode.IsLetter(c) || unicode.IsDigit(c) {
			var b [utf8.UTFMax]byte
			_, _ = r.word.Write(b[:utf8.EncodeRune(b[:], unicode.ToLower(c))])
			r.inWord = true
		} else {
			r.endWord()
		}
		if unicode.IsSpace(c) {
			continue
		}
		r.nonSpace++
		if c < utf8.RuneSelf {
			r.ascii[c]++
			r.top = max(r.top, r.ascii[c])
		} else if n, ok := r.byRune[c]; ok || len(r.byRune) < maxDistinct {
			r.byRune[c] = n + 1
			r.top = max(r.top, n+1)
		}
	}
}

func (r *replyStats) endWord() {
	if !r.inWord {
		return
	}
	r.words++
	if len(r.distinct) < maxDistinct {
		r.distinct[r.word.Sum64()] = struct{}{}
	}
	r.word.Reset()
	r.inWord = false
}

// incoherent names the coherence check the reply fails, or "".
func (r *replyStats) incoherent() string {
	r.endWord()
	switch {
	case r.runes >= minRunesReplacement && r.replacement*4 >= r.runes:
		return "replacement_characters"
	case r.nonSpace >= minRunesDominant && r.top*100 > r.nonSpace*dominantPercent:
		return "one_character"
	case r.words >= minWordsDiversity && int64(len(r.distinct))*diversityRatio < r.words:
		return "low_diversity"
	}
	return ""
}

// checkWork runs the continuous checks on a reply whose receipt checked
// out, from what the gateway observed: the reason code and strike weight
// of the first check it fails, or "" if it passes.
func (j *jobRun) checkWork(m *relaymsg.Done, rawSpeed int64) (string, int64) {
	claim := m.Usage
	switch {
	case claim.CompletionTokens > 2*j.deltas+8 && claim.CompletionTokens > j.replyBytes/2+8,
		claim.PromptTokens > int64(j.jobBytes)+16:
		// More tokens than the deltas relayed (one a token, as every
		// streaming backend sends them) or than the bytes could hold:
		// the claim is inflated.
		return "usage_inflated", store.ProofStrikes
	case j.s.limits.MaxTokPerSec > 0 && rawSpeed > j.s.limits.MaxTokPerSec*1000:
		// Faster, from the post of the job to its done, than any
		// hardware decodes a single stream: not generated.
		return "impossible_speed", store.ProofStrikes
	case j.job.Canary:
		// A canary's content is judged by its answer: an empty or odd
		// reply is right when every honest worker's greedy reply is the
		// same.
		return "", 0
	case j.deltas == 0:
		// Nothing relayed, whatever the finish reason. A model may end
		// its reply at once, and an honest one does now and then: the
		// reply earns nothing and the job goes to another worker, but it
		// weighs no strike (a worker that only ever ends at once fails
		// its canaries). A second worker's empty reply to the same job,
		// or the last attempt's, is the answer: the request asked for it.
		if j.empties > 0 || j.attempts >= j.s.limits.MaxAttempts {
			return "", 0
		}
		j.empties++
		return "empty_reply", 0
	}
	if why := j.stats.incoherent(); why != "" {
		// A request can ask for such a reply ("repeat ha 200 times"),
		// so it is not rejected, refunded or struck: that would give the
		// client the reply free and let it quarantine honest workers. It
		// makes the worker a suspect, whose next canary comes at once.
		j.s.log.Info("reply looks incoherent; the worker gets a canary", "job", j.job.ID, "worker", j.worker, "check", why)
		j.s.suspect(j.worker)
	}
	return "", 0
}

// OnSuspect sets what the API calls with a worker whose reply looked
// wrong but could have been asked for (the canary runner's Suspect).
func (s *Server) OnSuspect(f func(conn string)) { s.suspects.Store(&f) }

func (s *Server) suspect(conn string) {
	if f := s.suspects.Load(); f != nil && *f != nil {
		(*f)(conn)
	}
}

// errWorkRejected ends a reply that failed a check after part of it
// reached the client.
var errWorkRejected = &oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer, Code: "reply_rejected",
	Message: "The reply failed the network's checks on a worker's work, so it was rejected. The request was not charged."}

// rejectWork ends a worker's part in a job whose reply failed a check: the
// worker earns nothing and takes the strikes; its connection stays (a
// quarantined worker is sent canaries only). The job moves to another
// worker if nothing reached the client, else it ends with a refund.
func (j *jobRun) rejectWork(clientCtx context.Context, why string, strikes int64) (outcome, bool, error) {
	s := j.s
	worker := j.worker
	s.log.Warn("reply rejected by a check", "job", j.job.ID, "worker", worker, "check", why)
	kind := store.VerdictRejected
	if j.job.Canary {
		kind, strikes = store.VerdictCanaryFailed, max(strikes, store.CanaryStrikes)
	}
	s.Judge(store.Verdict{JobID: j.job.ID, Conn: worker, Pubkey: j.workerPubkey, Kind: kind,
		Strikes: strikes, Reason: why, At: s.now()})
	return j.dropReply(clientCtx)
}

// refuseWork ends the part in a job of a worker a verdict took out of good
// standing while it ran: the store refused its completion, so it earns
// nothing (it was judged already: no new strike). The job moves to another
// worker if nothing reached the client, else it ends with a refund.
func (j *jobRun) refuseWork(clientCtx context.Context) (outcome, bool, error) {
	j.s.log.Warn("reply of a worker out of good standing refused", "job", j.job.ID, "worker", j.worker)
	return j.dropReply(clientCtx)
}

// dropReply settles a job whose worker's reply is not accepted: the worker
// is excluded from it, and the job moves to another worker if nothing
// reached the client (a canary is not moved: it is judged on what its
// worker did), else it fails with a refund.
func (j *jobRun) dropReply(clientCtx context.Context) (outcome, bool, error) {
	s, worker := j.s, j.worker
	if j.excluded == nil {
		j.excluded = map[string]bool{}
	}
	j.excluded[worker] = true
	if j.out.committed() || j.job.Canary {
		j.worker = ""
		s.settleFailure(j.job.ID, "reply_rejected", true)
		return outcomeFailed, true, j.out.fail(errWorkRejected)
	}
	res, err := j.retry(clientCtx)
	return res, true, err
}

// Judge records a verdict, filling in the identity's account and token
// from the job and the worker, and updates dispatch's view of the worker.
// A store error is logged: the job's settlement does not wait on it.
func (s *Server) Judge(v store.Verdict) {
	if v.Conn == "" {
		s.log.Error("verdict without a worker", "job", v.JobID)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if v.AccountID == "" {
		if job, err := s.store.GetJob(ctx, v.JobID); err == nil && (v.Pubkey == "" || v.Pubkey == job.WorkerPubkey) {
			v.AccountID, v.Pubkey = job.WorkerAccount, job.WorkerPubkey
		}
	}
	if v.TokenHash == "" && v.Pubkey != "" {
		if rep, err := s.store.GetReputation(ctx, v.AccountID, v.Pubkey); err == nil {
			v.TokenHash = rep.TokenHash
		}
	}
	if v.Pubkey == "" || v.AccountID == "" || v.TokenHash == "" {
		s.log.Error("verdict on an unknown worker", "job", v.JobID, "worker", v.Conn, "kind", v.Kind)
		return
	}
	rep, err := s.store.Judge(ctx, v)
	if err != nil {
		s.log.Error("record verdict", "job", v.JobID, "worker", v.Conn, "kind", v.Kind, "err", err)
		return
	}
	s.log.Info("verdict", "job", v.JobID, "worker", v.Conn, "pubkey", v.Pubkey, "kind", v.Kind, "reason", v.Reason,
		"strikes", rep.Strikes, "standing", rep.Standing)
	// The live record has the worse of the identity's and the token's
	// standing: dispatch goes by it.
	standing, strikes := rep.Standing, rep.Strikes
	if w, err := s.store.GetWorker(ctx, v.Conn); err == nil {
		standing, strikes = w.Standing, w.Strikes
	}
	s.dispatch.Judged(v.Conn, standing, strikes)
	if standing == store.StandingBanned {
		// A banned worker is done here: its connection closes, and the
		// store refuses it (and its token) on the next connect.
		s.cut(ctx, v.Conn, "banned")
	}
	if standing != store.StandingActive {
		// The identity's other live connections (and, for a ban, the
		// token's) hold the standing of their connect: they are closed
		// too, and come back, if they may, with the new one.
		s.cutSiblings(ctx, v, standing == store.StandingBanned)
	}
}

// cut drops a worker from dispatch and the store and closes its
// connection.
func (s *Server) cut(ctx context.Context, conn, why string) {
	s.dispatch.Forget(conn)
	if _, err := s.store.DeleteWorker(ctx, conn); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("drop worker", "worker", conn, "why", why, "err", err)
	}
	if err := s.conns.Delete(ctx, conn); err != nil {
		s.log.Warn("close worker connection", "worker", conn, "why", why, "err", err)
	}
}

// cutSiblings closes the other live connections of a judged identity, and
// with token those of its token (a ban), that do not have the standing
// yet: a verdict reaches each at its next connect. A quarantined token's
// other identities take it at their next connect.
func (s *Server) cutSiblings(ctx context.Context, v store.Verdict, token bool) {
	ws, err := s.store.Workers(ctx)
	if err != nil {
		s.log.Warn("list the judged worker's other connections", "err", err)
		return
	}
	for _, w := range ws {
		same := (w.Pubkey == v.Pubkey && w.AccountID == v.AccountID) || (token && w.TokenHash == v.TokenHash)
		if w.Conn != v.Conn && same && (token || !w.Quarantined()) {
			s.cut(ctx, w.Conn, "verdict on its identity or token")
		}
	}
}
