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
	// those that had one on this connection.
	busy, tested map[string]bool
	// routine is when each model's last routine canary went.
	routine map[string]time.Time
	// refs are reference replies: a trusted worker's, or two accounts'
	// agreed one, by model, prompt and max_tokens.
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
		busy: map[string]bool{}, tested: map[string]bool{}, routine: map[string]time.Time{},
		refs: map[refKey]string{}, sem: make(chan struct{}, cfg.MaxInFlight)}, nil
}

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
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("canary pass", "err", err)
		}
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
		rep, err := r.cfg.Store.GetReputation(ctx, w.AccountID, w.Pubkey)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("canary: reputation of %s: %w", w.Conn, err)
		}
		reps[w.Conn] = rep
		for _, m := range w.Models {
			byModel[m] = append(byModel[m], w)
		}
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, model := range sortedKeys(byModel) {
		pool := byModel[model]
		for _, w := range pool {
			rep := reps[w.Conn]
			fresh := !r.tested[w.Conn] && rep.CanariesPassed+rep.CanariesFailed == 0
			if !r.busy[w.Conn] && (fresh || w.Quarantined()) {
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
	job     store.Job
	text    string
	earning int64
}

// check runs one canary on target and judges it (and any referee's).
func (r *Runner) check(ctx context.Context, model string, target store.Worker, pool []store.Worker, reps map[string]store.Reputation) {
	m, ok := r.cfg.Catalog.Resolve(model)
	if !ok {
		return
	}
	maxTokens := maxTokenChoices[rand.IntN(len(maxTokenChoices))]
	i := rand.IntN(len(openEnded))
	if known := r.refsOf(model); len(known) > 0 && reps[target.Conn].CanariesPassed == 0 && !reps[target.Conn].Trusted {
		// A worker that never passed a canary gets a prompt with a
		// reference reply already: its verdict then needs its own reply
		// only, and comes sooner.
		k := known[rand.IntN(len(known))]
		i, maxTokens = k.prompt, k.maxTokens
	}
	if m.KnownAnswers {
		i := rand.IntN(len(knownAnswer))
		a, ok := r.ask(ctx, model, knownAnswer[i], maxTokens, target.Conn)
		if ok {
			r.judge(a, answered(a.text, knownAnswer[i].Answers), "canary_wrong_answer")
		}
		return
	}
	p, key := openEnded[i], refKey{model, i, maxTokens}
	if reps[target.Conn].Trusted {
		if a, ok := r.ask(ctx, model, p, maxTokens, target.Conn); ok {
			r.setRef(key, a.text)
			r.judge(a, true, "")
		}
		return
	}
	if ref, ok := r.ref(key); ok {
		if a, ok := r.ask(ctx, model, p, maxTokens, target.Conn); ok {
			r.judge(a, similar(a.text, ref), "canary_mismatch")
		}
		return
	}
	referees := refereesFor(target, pool, reps)
	if len(referees) == 0 {
		r.inconclusive.Add(1)
		return
	}
	ref := referees[0]
	var ta, ra answer
	var tok, rok bool
	var wg sync.WaitGroup
	wg.Go(func() { ta, tok = r.ask(ctx, model, p, maxTokens, target.Conn) })
	wg.Go(func() { ra, rok = r.ask(ctx, model, p, maxTokens, ref.Conn) })
	wg.Wait()
	switch {
	case !tok || !rok:
		if rok && reps[ref.Conn].Trusted {
			r.setRef(key, ra.text)
			r.judge(ra, true, "")
		}
		r.inconclusive.Add(1)
	case reps[ref.Conn].Trusted:
		r.setRef(key, ra.text)
		r.judge(ra, true, "")
		r.judge(ta, similar(ta.text, ra.text), "canary_mismatch")
	case similar(ta.text, ra.text):
		// Two accounts' workers agree: both pass, and the reply is a
		// reference from now on.
		r.setRef(key, ra.text)
		r.judge(ta, true, "")
		r.judge(ra, true, "")
	default:
		r.tieBreak(ctx, model, p, maxTokens, key, ta, ra, target, ref, referees[1:])
	}
}

// tieBreak asks a worker of a third account when two disagree: the one it
// agrees with passes, the other fails; without a clear majority nobody is
// judged.
func (r *Runner) tieBreak(ctx context.Context, model string, p Prompt, maxTokens int64, key refKey, ta, ra answer, target, ref store.Worker, rest []store.Worker) {
	i := slices.IndexFunc(rest, func(w store.Worker) bool { return w.AccountID != ref.AccountID })
	if i < 0 {
		r.inconclusive.Add(1)
		return
	}
	qa, ok := r.ask(ctx, model, p, maxTokens, rest[i].Conn)
	if !ok {
		r.inconclusive.Add(1)
		return
	}
	withT, withR := similar(qa.text, ta.text), similar(qa.text, ra.text)
	switch {
	case withT && !withR:
		r.setRef(key, qa.text)
		r.judge(ta, true, "")
		r.judge(qa, true, "")
		r.judge(ra, false, "canary_mismatch")
	case withR && !withT:
		r.setRef(key, qa.text)
		r.judge(ra, true, "")
		r.judge(qa, true, "")
		r.judge(ta, false, "canary_mismatch")
	default:
		r.inconclusive.Add(1)
	}
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
	return answer{job: job, text: reply.Text, earning: reply.Earning}, true
}

// judge records a canary's verdict.
func (r *Runner) judge(a answer, pass bool, reason string) {
	v := store.Verdict{JobID: a.job.ID, Conn: a.job.Worker, Pubkey: a.job.WorkerPubkey, AccountID: a.job.WorkerAccount,
		Kind: store.VerdictCanaryPassed, Earning: a.earning, At: r.cfg.Now()}
	if pass {
		r.passed.Add(1)
	} else {
		r.failed.Add(1)
		v.Kind, v.Strikes, v.Reason, v.Earning = store.VerdictCanaryFailed, store.CanaryStrikes, reason, 0
	}
	r.cfg.Gateway.Judge(v)
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
