// Package canary checks workers' work with jobs the gateway makes itself:
// ordinary chat requests from a corpus, sent through the same handler,
// queue, dispatch and relay as a user's, so a worker cannot tell them from
// real ones. Each model gets one at a configurable rate; a new worker
// identity gets one at once, and a quarantined one gets them until it is
// cleared or banned.
//
// An answer is judged by content: a model the catalog says can answer
// known-answer questions must answer them right; otherwise the worker's
// greedy reply is compared with another worker's to the same prompt — an
// operator's trusted reference worker where there is one, else a worker of
// another account, with a third account's breaking a disagreement. A
// verdict goes to the store (functions/store's Judge): a pass earns the
// canary's share and takes strikes back, a failure adds CanaryStrikes.
//
// Canaries are paid by the network's own canary account, never by a user.
// Their text lives in memory, for as long as a comparison needs it; it is
// never logged or stored.
package canary

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// AccountID is the network's canary account: it pays for canaries.
const AccountID = "canary"

// Store is what the runner needs from the store.
type Store interface {
	CreateAccount(ctx context.Context, a store.Account) error
	PutAPIKey(ctx context.Context, s store.Secret) error
	Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error)
	Workers(ctx context.Context) ([]store.Worker, error)
	GetReputation(ctx context.Context, accountID, pubkey string) (store.Reputation, error)
	GetJob(ctx context.Context, id string) (store.Job, error)
}

// Gateway runs canaries and records verdicts (functions/api's Server).
type Gateway interface {
	Canary(ctx context.Context, c api.CanaryRequest) (api.CanaryReply, error)
	Judge(v store.Verdict)
}

// Config configures a Runner. Store, Gateway, Catalog, Secret and Log are
// required.
type Config struct {
	Store   Store
	Gateway Gateway
	Catalog *catalog.Catalog
	// Secret derives the canary account's API key, the same in every
	// process (the listener secret).
	Secret string
	// Every is each model's routine canary interval: the canary rate.
	// Default 1 minute.
	Every time.Duration
	// Tick is how often the runner looks for new and quarantined
	// workers. Default 5 s.
	Tick time.Duration
	// MaxInFlight bounds the canaries running at once. Default 4.
	MaxInFlight int
	// DailyBudget is what the canary account is granted each UTC day, in
	// credits: the most canaries can earn workers in a day. Default
	// 100,000 ($1,000).
	DailyBudget int64
	Log         *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// minRefs is how many reference replies per model the runner keeps ready
// from trusted workers.
const minRefs = 8

// knownAnswerTokens is a known-answer canary's max_tokens: enough for a
// thinking model's reasoning before its answer.
const knownAnswerTokens = 1024

// maxTokenChoices are canaries' max_tokens: a short reply, like many
// real ones, and the same for every reply compared with it.
var maxTokenChoices = []int64{16, 24, 32}

// Counts are what a runner did, for operators and the overhead figure.
type Counts struct {
	Sent, Passed, Failed, Inconclusive int64
}

// Runner sends canaries and judges them.
type Runner struct {
	cfg     Config
	keyHash string

	mu sync.Mutex
	// ready is set once the canary account and key exist; granted is the
	// UTC day the budget was last granted.
	ready   bool
	granted string
	// busy are the connections with a canary in flight; tested are
	// those that had one on this connection; suspects get one at the
	// next pass.
	busy, tested, suspects map[string]bool
	// reps caches what a pass reads of each connection's reputation (its
	// trust and canary counts, which only verdicts change), for repTTL or
	// until this runner judges it.
	reps map[string]cachedRep
	// routine is when each model's last routine canary went.
	routine map[string]time.Time
	// refs are reference replies, a trusted worker's only, by model,
	// prompt and max_tokens.
	refs map[refKey]string

	sem                                chan struct{}
	wg                                 sync.WaitGroup
	sent, passed, failed, inconclusive atomic.Int64
}

type refKey struct {
	model     string
	prompt    int
	maxTokens int64
}

// New makes a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Gateway == nil || cfg.Catalog == nil || cfg.Secret == "" || cfg.Log == nil {
		return nil, errors.New("canary: Store, Gateway, Catalog, Secret and Log are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Minute
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4
	}
	if cfg.DailyBudget <= 0 {
		cfg.DailyBudget = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mac := hmac.New(sha256.New, []byte(cfg.Secret))
	mac.Write([]byte("c0mpute canary account key v1"))
	return &Runner{cfg: cfg, keyHash: credential.Hash("canary_" + hex.EncodeToString(mac.Sum(nil))),
		busy: map[string]bool{}, tested: map[string]bool{}, suspects: map[string]bool{}, reps: map[string]cachedRep{},
		routine: map[string]time.Time{},
		refs:    map[refKey]string{}, sem: make(chan struct{}, cfg.MaxInFlight)}, nil
}

// Suspect asks for a canary on a worker at the next pass: its reply
// looked wrong in a way a request could have asked for.
func (r *Runner) Suspect(conn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.suspects) < maxSuspects {
		r.suspects[conn] = true
	}
}

// maxSuspects bounds the workers waiting for a suspicion's canary.
const maxSuspects = 10_000

// Counts returns what the runner did so far.
func (r *Runner) Counts() Counts {
	return Counts{Sent: r.sent.Load(), Passed: r.passed.Load(), Failed: r.failed.Load(), Inconclusive: r.inconclusive.Load()}
}

// Run runs passes every Tick until ctx ends, then waits for the canaries
// in flight.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	defer r.wg.Wait()
	for {
		r.safely(func() {
			if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn("canary pass", "err", err)
			}
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Wait waits for the canaries in flight.
func (r *Runner) Wait() { r.wg.Wait() }

// Pass looks at the online workers once and starts the canaries due: one
// for each new identity and each quarantined worker without one in
// flight, and each model's routine one when Every has passed.
func (r *Runner) Pass(ctx context.Context) error {
	if err := r.prepare(ctx); err != nil {
		return err
	}
	ws, err := r.cfg.Store.Workers(ctx)
	if err != nil {
		return fmt.Errorf("canary: workers: %w", err)
	}
	reps := map[string]store.Reputation{}
	byModel := map[string][]store.Worker{}
	for _, w := range ws {
		if !w.Registered || w.Draining {
			continue
		}
		rep, err := r.reputation(ctx, w)
		if err != nil {
			return err
		}
		reps[w.Conn] = rep
		for _, m := range w.Models {
			if cm, ok := r.cfg.Catalog.Resolve(m); ok && (cm.Image != nil || cm.Ring != nil) {
				// Canaries are chat prompts: an image model gets none. A
				// ring's work is proven by its stages' receipts, and a
				// canary's verdict would credit or strike its first stage
				// alone for the whole ring.
				continue
			}
			byModel[m] = append(byModel[m], w)
		}
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Forget connections that are gone: the maps stay as large as the
	// network.
	for _, m := range []map[string]bool{r.tested, r.suspects} {
		for conn := range m {
			if _, ok := reps[conn]; !ok && !r.busy[conn] {
				delete(m, conn)
			}
		}
	}
	for conn := range r.reps {
		if _, ok := reps[conn]; !ok {
			delete(r.reps, conn)
		}
	}
	for _, model := range sortedKeys(byModel) {
		pool := byModel[model]
		for _, w := range pool {
			rep := reps[w.Conn]
			fresh := !r.tested[w.Conn] && rep.CanariesPassed+rep.CanariesFailed == 0
			if !r.busy[w.Conn] && (fresh || w.Quarantined() || r.suspects[w.Conn]) {
				delete(r.suspects, w.Conn)
				r.start(ctx, model, w, pool, reps)
			}
		}
		if len(r.refsOfLocked(model)) < minRefs {
			// Reference replies come from the trusted workers ahead of
			// need: a new worker's first canary then waits for its own
			// reply only.
			for _, w := range pool {
				if reps[w.Conn].Trusted && !r.busy[w.Conn] {
					r.start(ctx, model, w, pool, reps)
					break
				}
			}
		}
		if now.Sub(r.routine[model]) < r.cfg.Every {
			continue
		}
		idle := slices.DeleteFunc(slices.Clone(pool), func(w store.Worker) bool { return r.busy[w.Conn] })
		if len(idle) > 0 {
			r.routine[model] = now
			r.start(ctx, model, idle[rand.IntN(len(idle))], pool, reps)
		}
	}
	return nil
}

// safely runs f, logging a panic instead of dying of it.
func (r *Runner) safely(f func()) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Log.Error("canary panicked", "panic", p)
		}
	}()
	f()
}

// repTTL is how long a pass reuses a reputation it read: other
// instances' verdicts, and the operator's trust, are seen within it.
const repTTL = time.Minute

type cachedRep struct {
	rep  store.Reputation
	read time.Time
}

// reputation is w's reputation as a pass needs it: once it has a canary
// verdict, read once per repTTL, not every tick.
func (r *Runner) reputation(ctx context.Context, w store.Worker) (store.Reputation, error) {
	now := r.cfg.Now()
	r.mu.Lock()
	c, ok := r.reps[w.Conn]
	r.mu.Unlock()
	if ok && now.Sub(c.read) < repTTL {
		return c.rep, nil
	}
	rep, err := r.cfg.Store.GetReputation(ctx, w.AccountID, w.Pubkey)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rep, fmt.Errorf("canary: reputation of %s: %w", w.Conn, err)
	}
	if rep.CanariesPassed+rep.CanariesFailed > 0 {
		// A worker without a verdict yet is read every pass: its first
		// canary, and its trust, are due at once.
		r.mu.Lock()
		r.reps[w.Conn] = cachedRep{rep: rep, read: now}
		r.mu.Unlock()
	}
	return rep, nil
}

// start runs one canary for target in the background; r.mu is held.
func (r *Runner) start(ctx context.Context, model string, target store.Worker, pool []store.Worker, reps map[string]store.Reputation) {
	r.busy[target.Conn], r.tested[target.Conn] = true, true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				r.cfg.Log.Error("canary panicked", "panic", p)
			}
			r.mu.Lock()
			delete(r.busy, target.Conn)
			r.mu.Unlock()
		}()
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-r.sem }()
		r.check(ctx, model, target, pool, reps)
	}()
}

// prepare makes sure the canary account and its key exist, and grants the
// day's budget once a day (idempotently: every process grants the same
// day's budget under the same key, and it is applied once).
func (r *Runner) prepare(ctx context.Context) error {
	r.mu.Lock()
	ready, granted := r.ready, r.granted
	r.mu.Unlock()
	if !ready {
		err := r.cfg.Store.CreateAccount(ctx, store.Account{ID: AccountID, CreatedAt: r.cfg.Now()})
		if err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("canary: account: %w", err)
		}
		err = r.cfg.Store.PutAPIKey(ctx, store.Secret{Hash: r.keyHash, ID: r.keyHash[:12], AccountID: AccountID, CreatedAt: r.cfg.Now()})
		if err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("canary: key: %w", err)
		}
	}
	day := r.cfg.Now().UTC().Format(time.DateOnly)
	if granted != day {
		if _, err := r.cfg.Store.Grant(ctx, AccountID, r.cfg.DailyBudget, "canary-budget:"+day, false); err != nil {
			return fmt.Errorf("canary: budget: %w", err)
		}
	}
	r.mu.Lock()
	r.ready, r.granted = true, day
	r.mu.Unlock()
	return nil
}

// answer is one worker's reply to a canary.
type answer struct {
	job       store.Job
	text      string
	reasoning string
	earning   int64
}

// check runs one canary on target and judges it (and any referee's).
func (r *Runner) check(ctx context.Context, model string, target store.Worker, pool []store.Worker, reps map[string]store.Reputation) {
	m, ok := r.cfg.Catalog.Resolve(model)
	if !ok {
		return
	}
	if m.KnownAnswers {
		// Room for a thinking model to reason first (its reasoning
		// counts against max_tokens); the answer may be in either.
		i := rand.IntN(len(knownAnswer))
		a, ok := r.ask(ctx, model, knownAnswer[i], knownAnswerTokens, target.Conn)
		if ok {
			r.judge(a, knows(i, a), "canary_wrong_answer")
		}
		return
	}
	c := comparison{r: r, ctx: ctx, model: model, target: target, referees: refereesFor(target, pool, reps), reps: reps}
	first := c.round(-1)
	if first.verdict != mismatch {
		c.settle(first, first.verdict == match, store.CanaryStrikes)
		return
	}
	// Greedy replies of the same weights on different backends part at a
	// near tie in the logits: a mismatch is judged only when a second
	// prompt's reply does not match either. An honest worker that parted
	// once matches the next; a cheater matches neither.
	second := c.round(first.prompt)
	switch second.verdict {
	case match:
		c.settle(first, true, 0)
		c.settle(second, true, 0)
	case mismatch:
		c.settle(first, false, store.CanaryStrikes)
		c.settle(second, false, 0)
	default:
		r.inconclusive.Add(1)
	}
}

// verdict of one comparison round.
type verdict int

const (
	undecided verdict = iota
	match
	mismatch
)

// comparison is one canary of a model without known answers: the target's
// greedy reply against a reference.
type comparison struct {
	r        *Runner
	ctx      context.Context
	model    string
	target   store.Worker
	referees []store.Worker
	reps     map[string]store.Reputation
}

// round is one prompt's comparison: the target's answer and how it
// compares; prompt is the one asked (so the next round asks another).
type round struct {
	answer  answer
	prompt  int
	verdict verdict
}

// settle records a round's verdict on the target.
func (c comparison) settle(rd round, pass bool, strikes int64) {
	if rd.verdict == undecided {
		c.r.inconclusive.Add(1)
		return
	}
	c.r.judgeWith(rd.answer, pass, "canary_mismatch", strikes)
}

// round asks the target one prompt (not avoid) and compares its reply
// with a reference: one held already, a trusted referee's, or another
// account's (a third account's breaking a disagreement). Referees are
// judged here; the target's verdict is the caller's.
func (c comparison) round(avoid int) round {
	r, ctx := c.r, c.ctx
	trusted := c.reps[c.target.Conn].Trusted
	maxTokens := maxTokenChoices[rand.IntN(len(maxTokenChoices))]
	i := rand.IntN(len(openEnded))
	if known := slices.DeleteFunc(r.refsOf(c.model), func(k refKey) bool { return k.prompt == avoid }); len(known) > 0 && !trusted {
		// A held reference makes the verdict need the target's reply
		// only, and come sooner.
		k := known[rand.IntN(len(known))]
		i, maxTokens = k.prompt, k.maxTokens
	}
	for i == avoid {
		i = rand.IntN(len(openEnded))
	}
	p, key := openEnded[i], refKey{c.model, i, maxTokens}
	rd := round{prompt: i}
	if trusted {
		// The operator's reference worker sets the reference.
		var ok bool
		if rd.answer, ok = r.ask(ctx, c.model, p, maxTokens, c.target.Conn); ok {
			r.setRef(key, rd.answer.text)
			rd.verdict = match
		}
		return rd
	}
	if ref, ok := r.ref(key); ok {
		if rd.answer, ok = r.ask(ctx, c.model, p, maxTokens, c.target.Conn); ok {
			rd.verdict = verdictOf(similar(rd.answer.text, ref))
		}
		return rd
	}
	if len(c.referees) == 0 {
		return rd
	}
	referee := c.referees[0]
	var ra answer
	var tok, rok bool
	var wg sync.WaitGroup
	wg.Go(func() { r.safely(func() { rd.answer, tok = r.ask(ctx, c.model, p, maxTokens, c.target.Conn) }) })
	wg.Go(func() { r.safely(func() { ra, rok = r.ask(ctx, c.model, p, maxTokens, referee.Conn) }) })
	wg.Wait()
	refTrusted := c.reps[referee.Conn].Trusted
	if rok && refTrusted {
		r.setRef(key, ra.text)
		r.judge(ra, true, "")
	}
	switch {
	case !tok || !rok:
	case refTrusted:
		rd.verdict = verdictOf(similar(rd.answer.text, ra.text))
	case similar(rd.answer.text, ra.text):
		// Two accounts' workers agree: both pass. Their reply is not
		// kept as a reference (only a trusted worker's is): two accounts
		// of one cheater would otherwise judge everyone after them.
		r.judge(ra, true, "")
		rd.verdict = match
	default:
		rd.verdict = c.tieBreak(p, maxTokens, rd.answer, ra, referee)
	}
	return rd
}

func verdictOf(same bool) verdict {
	if same {
		return match
	}
	return mismatch
}

// tieBreak asks a worker of a third account when the target and a
// referee disagree: the target's verdict is whether it agrees with the
// third, and whichever of them the third agrees with passes. The referee
// the third disagrees with is not judged: its parting may be a near tie,
// and its own canaries judge it. Without a third account, or a clear
// majority, the round is undecided.
func (c comparison) tieBreak(p Prompt, maxTokens int64, ta, ra answer, referee store.Worker) verdict {
	r := c.r
	i := slices.IndexFunc(c.referees[1:], func(w store.Worker) bool { return w.AccountID != referee.AccountID })
	if i < 0 {
		return undecided
	}
	qa, ok := r.ask(c.ctx, c.model, p, maxTokens, c.referees[1+i].Conn)
	if !ok {
		return undecided
	}
	withT, withR := similar(qa.text, ta.text), similar(qa.text, ra.text)
	switch {
	case withT && !withR:
		r.judge(qa, true, "")
		return match
	case withR && !withT:
		r.judge(qa, true, "")
		r.judge(ra, true, "")
		return mismatch
	}
	return undecided
}

// refereesFor are the workers whose replies target's can be compared
// with: other accounts' (a contributor cannot vouch for itself), not
// quarantined, trusted ones first, then the most proven.
func refereesFor(target store.Worker, pool []store.Worker, reps map[string]store.Reputation) []store.Worker {
	var out []store.Worker
	for _, w := range pool {
		if w.AccountID != target.AccountID && !w.Quarantined() {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Worker) int {
		ra, rb := reps[a.Conn], reps[b.Conn]
		if ra.Trusted != rb.Trusted {
			if ra.Trusted {
				return -1
			}
			return 1
		}
		return int(rb.CanariesPassed - ra.CanariesPassed)
	})
	return out
}

// ask sends prompt p to the worker conn as a canary and returns its reply,
// with the job as the store has it. ok is false when the canary did not
// complete on that worker (it timed out, the worker failed or left, or a
// check rejected the reply — which judged it already).
func (r *Runner) ask(ctx context.Context, model string, p Prompt, maxTokens int64, conn string) (answer, bool) {
	msgs := []oaiwire.Message{}
	if p.System != "" {
		msgs = append(msgs, oaiwire.Message{Role: "system", Content: oaiwire.Content{Text: p.System}})
	}
	msgs = append(msgs, oaiwire.Message{Role: "user", Content: oaiwire.Content{Text: p.User}})
	zero := 0.0
	req := &oaiwire.ChatRequest{Model: model, Messages: msgs, MaxTokens: &maxTokens, Temperature: &zero}
	r.sent.Add(1)
	reply, err := r.cfg.Gateway.Canary(ctx, api.CanaryRequest{AccountID: AccountID, KeyHash: r.keyHash, Request: req, Target: conn})
	if err != nil {
		r.cfg.Log.Warn("canary", "worker", conn, "err", err)
		return answer{}, false
	}
	if reply.Err != nil {
		r.cfg.Log.Info("canary did not complete", "worker", conn, "job", reply.JobID, "code", reply.Err.Code)
		return answer{}, false
	}
	job, err := r.cfg.Store.GetJob(ctx, reply.JobID)
	if err != nil || job.Worker != conn || job.State != store.JobDone {
		r.cfg.Log.Warn("canary job not done on its worker", "worker", conn, "job", reply.JobID, "err", err)
		return answer{}, false
	}
	return answer{job: job, text: reply.Text, reasoning: reply.Reasoning, earning: reply.Earning}, true
}

// judge records a canary's verdict; a failure weighs CanaryStrikes.
func (r *Runner) judge(a answer, pass bool, reason string) {
	r.judgeWith(a, pass, reason, store.CanaryStrikes)
}

// judgeWith records a canary's verdict, a failure weighing strikes.
func (r *Runner) judgeWith(a answer, pass bool, reason string, strikes int64) {
	v := store.Verdict{JobID: a.job.ID, Conn: a.job.Worker, Pubkey: a.job.WorkerPubkey, AccountID: a.job.WorkerAccount,
		Kind: store.VerdictCanaryPassed, Earning: a.earning, At: r.cfg.Now()}
	if pass {
		r.passed.Add(1)
	} else {
		r.failed.Add(1)
		v.Kind, v.Strikes, v.Reason, v.Earning = store.VerdictCanaryFailed, strikes, reason, 0
	}
	r.cfg.Gateway.Judge(v)
	r.mu.Lock()
	delete(r.reps, a.job.Worker) // its counts changed
	r.mu.Unlock()
}

// refsOf lists the reference replies held for model.
func (r *Runner) refsOf(model string) []refKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refsOfLocked(model)
}

func (r *Runner) refsOfLocked(model string) []refKey {
	var out []refKey
	for k := range r.refs {
		if k.model == model {
			out = append(out, k)
		}
	}
	return out
}

// References counts the reference replies held for model.
func (r *Runner) References(model string) int { return len(r.refsOf(model)) }

func (r *Runner) ref(k refKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.refs[k]
	return s, ok
}

func (r *Runner) setRef(k refKey, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs[k] = text
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
