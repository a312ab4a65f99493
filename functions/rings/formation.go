package rings

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// changed reacts to a change of rm's candidates (conns are the
// connections that announced, moved or left): with no plan, an attempt in
// progress is dropped and a new one waits for Debounce of quiet — but no
// longer than MaxWait after the candidates reached min_stages. Past
// MaxWait a probe runs on unless one of its own participants changed, and
// the change waits for the next attempt. A plan assigned or serving is
// kept; newcomers wait for the next formation. Under rm.mu.
func (f *Former) changed(rm *ringModel, conns ...string) {
	if rm.cur != nil {
		return
	}
	now := f.cfg.Now()
	if len(rm.cands) < rm.spec.MinStages {
		rm.since = time.Time{}
	} else if rm.since.IsZero() {
		rm.since = now
	}
	if p := rm.probe; p != nil {
		own := slices.ContainsFunc(conns, func(c string) bool { return slices.Contains(p.conns, c) })
		if !own && !rm.since.IsZero() && !now.Before(rm.since.Add(f.cfg.MaxWait)) {
			rm.late = true
			return
		}
		rm.probe = nil
		stop(&rm.deadline)
	}
	d := f.cfg.Debounce
	if !rm.since.IsZero() {
		d = max(min(d, rm.since.Add(f.cfg.MaxWait).Sub(now)), 0)
	}
	f.schedule(rm, d)
}

// ended closes an attempt that probed: the next change starts a new wait,
// and a change that came in while the probe ran on is acted on now. Under
// rm.mu.
func (f *Former) ended(rm *ringModel) {
	rm.since = time.Time{}
	if rm.late {
		rm.late = false
		f.changed(rm)
	}
}

// schedule (re)starts the wait before the next attempt.
func (f *Former) schedule(rm *ringModel, d time.Duration) {
	stop(&rm.wait)
	rm.waitGen++
	gen := rm.waitGen
	rm.wait = f.after(d, func(ctx context.Context) {
		f.locked(rm, func() {
			if rm.waitGen != gen {
				return
			}
			rm.wait = nil
			f.attempt(ctx, rm)
		})
	})
}

// after runs fn after d on the Former's context, recovering a panic: a
// timer must not take the process down.
func (f *Former) after(d time.Duration, fn func(ctx context.Context)) func() bool {
	return f.cfg.AfterFunc(d, func() {
		defer func() {
			if p := recover(); p != nil {
				f.log.Error("ring timer panicked", "panic", p)
			}
		}()
		if f.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(f.ctx, timerWork)
		defer cancel()
		fn(ctx)
	})
}

// attempt starts a formation from the candidates, fastest first, at most
// MaxAttempt. Left out: those excluded from this attempt, those benched
// (Rejected) and those whose identity or token is not in good standing
// (read here, as nothing tells the Former when a verdict changes it) or
// whose standing cannot be read. Under rm.mu.
func (f *Former) attempt(ctx context.Context, rm *ringModel) {
	if rm.cur != nil || rm.probe != nil {
		return
	}
	now := f.cfg.Now()
	excluded := rm.exclude
	rm.exclude = map[string]bool{}
	for node, until := range rm.benched {
		if !now.Before(until) {
			delete(rm.benched, node)
		}
	}
	var pool []*candidate
	for conn, c := range rm.cands {
		if _, benched := rm.benched[c.node]; !excluded[conn] && !benched {
			pool = append(pool, c)
		}
	}
	slices.SortFunc(pool, func(a, b *candidate) int {
		if c := cmp.Compare(a.cap.LayerMicros, b.cap.LayerMicros); c != 0 {
			return c
		}
		return bytes.Compare(a.node[:], b.node[:])
	})
	var parts []*candidate
	for _, c := range pool {
		if len(parts) == MaxAttempt {
			break
		}
		st, err := f.standing(ctx, c.conn, c.account, c.pubkey)
		if err != nil {
			f.log.Warn("ring candidate left out: its standing could not be read", "model", rm.id, "conn", c.conn, "err", err)
			continue
		}
		if st != store.StandingActive {
			f.log.Info("ring candidate left out: not in good standing", "model", rm.id, "conn", c.conn, "node", c.node, "standing", st)
			continue
		}
		parts = append(parts, c)
	}
	partial := len(parts) < len(rm.cands)
	if len(parts) < rm.spec.MinStages {
		rm.since = time.Time{} // no probe to see through: the next change waits Debounce again
		if partial && len(rm.cands) >= rm.spec.MinStages {
			f.log.Info("ring attempt waits: too few candidates without those left out", "model", rm.id, "candidates", len(rm.cands),
				"left_out", len(rm.cands)-len(parts), "retry_in", f.cfg.Retry)
			f.schedule(rm, f.cfg.Retry)
		}
		return
	}
	rm.attempts++
	p := &probing{id: rm.attempts, nodes: map[shard.PublicKey]string{}, rows: map[string]shard.RTTRow{}, partial: partial}
	for _, c := range parts {
		p.conns = append(p.conns, c.conn)
		p.nodes[c.node] = c.conn
	}
	rm.probe = p
	if len(parts) == 1 {
		f.plan(ctx, rm) // a lone member has no peer to measure
		return
	}
	for _, c := range parts {
		var peers []relaymsg.RingPeer
		for _, o := range parts {
			if o != c {
				peers = append(peers, relaymsg.RingPeer{Node: o.node, Addr: o.addr})
			}
		}
		f.post(ctx, c.conn, &relaymsg.RingProbe{Model: rm.id, Peers: peers})
	}
	f.log.Info("ring probe", "model", rm.id, "attempt", p.id, "candidates", len(parts))
	rm.deadline = f.after(f.cfg.RTTTimeout, func(ctx context.Context) {
		f.locked(rm, func() {
			if rm.probe != p {
				return
			}
			rm.probe = nil
			rm.deadline = nil
			late, unreachable := p.blame()
			out, rule := late, "the candidates that sent no rtt row sit out the next attempt"
			if len(unreachable) > 0 {
				out, rule = unreachable, "the candidates no row reached sit out the next attempt"
			}
			for _, conn := range out {
				rm.exclude[conn] = true
			}
			f.log.Warn("ring probe timed out; "+rule, "model", rm.id, "attempt", p.id, "late", late, "unreachable", unreachable)
			rm.late = false
			rm.since = time.Time{}
			f.schedule(rm, f.cfg.Debounce)
		})
	})
}

// blame says who is at fault when a probe's deadline passes: late are the
// participants that sent no row; unreachable those that no row received
// from another participant lists, when at least one such row came. An
// unreachable candidate is the one to leave out: the honest are late
// because they are still dialling it (a row lists only the peers its
// member reached), while it answers at once. Only when every candidate is
// reached by some row — or no row says anything about it — are the late
// ones left out.
func (p *probing) blame() (late, unreachable []string) {
	for _, conn := range p.conns {
		if _, in := p.rows[conn]; !in {
			late = append(late, conn)
		}
	}
	for node, conn := range p.nodes {
		heard, reached := false, false
		for from, row := range p.rows {
			if from == conn {
				continue
			}
			heard = true
			reached = reached || slices.ContainsFunc(row.Peers, func(r shard.RTTPeer) bool { return r.To == node })
		}
		if heard && !reached {
			unreachable = append(unreachable, conn)
		}
	}
	slices.Sort(unreachable)
	return late, unreachable
}

// plan computes the ring from the probe's rows and assigns it; under
// rm.mu.
func (f *Former) plan(ctx context.Context, rm *ringModel) {
	p := rm.probe
	rm.probe = nil
	stop(&rm.deadline)
	defer f.ended(rm)
	now := f.cfg.Now().UnixMilli()
	in := shard.Inputs{Model: rm.desc}
	in.Params = shard.Params{Model: rm.offer.Hash, Admission: "open", VRAMFloorBytes: 1, ContextTokens: rm.spec.ContextTokens,
		MinStages: rm.spec.MinStages, MaxStages: rm.spec.MaxStages, Standbys: rm.spec.Standbys, Pinning: shard.PinNone,
		Seed: rm.seed, Time: now}
	in.Params.Sign(f.cfg.Key)
	// The gateway's own row: nominal, members do not probe it.
	own := shard.RTTRow{Time: now}
	byNode := map[shard.PublicKey]*candidate{}
	for _, conn := range p.conns {
		c := rm.cands[conn]
		if c == nil {
			continue // gone since the probe (changed drops the probe then; this is a guard)
		}
		byNode[c.node] = c
		in.Capabilities = append(in.Capabilities, c.cap)
		if row, ok := p.rows[conn]; ok {
			in.RTT = append(in.RTT, row)
		}
		own.Peers = append(own.Peers, shard.RTTPeer{To: c.node, Micros: 1})
	}
	own.Sign(f.cfg.Key)
	in.RTT = append(in.RTT, own)
	res, err := shard.NewPlan(in)
	if err != nil {
		f.log.Warn("no ring from the candidates", "model", rm.id, "attempt", p.id, "candidates", len(p.conns), "err", err)
		if p.partial {
			f.schedule(rm, f.cfg.Retry)
		}
		return
	}
	fm := &formed{model: rm.id, hash: res.Hash, plan: res.Plan, members: map[shard.PublicKey]*candidate{},
		accepted: map[shard.PublicKey]shard.Acceptance{}}
	var peers []relaymsg.RingPeer
	for _, m := range res.Plan.Members {
		c := byNode[m.Node]
		fm.members[m.Node] = c
		peers = append(peers, relaymsg.RingPeer{Node: m.Node, Addr: c.addr})
		if m.Stage == 0 && m.Role == shard.RolePrimary {
			fm.driver = c.conn
		}
	}
	msg, err := relaymsg.Encode(&relaymsg.RingAssign{Model: rm.id, Hash: res.Hash, Plan: res.Plan, Inputs: in,
		Manifest: rm.manifest, BlobURL: rm.spec.BlobURL, Peers: peers})
	if err != nil {
		f.log.Error("ring assignment does not fit a relay message", "model", rm.id, "plan", res.Hash, "members", len(peers), "err", err)
		return
	}
	rm.cur = fm
	f.log.Info("ring assigned", "model", rm.id, "plan", res.Hash, "stages", res.Plan.Stages, "members", len(res.Plan.Members),
		"token_us", res.Plan.TokenMicros)
	for _, m := range res.Plan.Members {
		c := fm.members[m.Node]
		if err := f.cfg.Post.Post(ctx, c.conn, msg); err != nil {
			f.log.Warn("ring assignment not delivered", "model", rm.id, "conn", c.conn, "err", err)
			f.void(ctx, rm, fmt.Sprintf("member %s unreachable", m.Node), c.conn, []string{c.conn})
			return
		}
	}
	rm.deadline = f.after(f.cfg.ReadyTimeout, func(ctx context.Context) {
		f.locked(rm, func() {
			if rm.cur != fm || fm.serving {
				return
			}
			rm.deadline = nil
			var late []string
			for node, c := range fm.members {
				if _, ok := fm.accepted[node]; !ok {
					late = append(late, c.conn)
				}
			}
			f.void(ctx, rm, fmt.Sprintf("%d members not ready in %v", len(late), f.cfg.ReadyTimeout), "", late)
		})
	})
}

// serve starts a plan every member accepted: the ring model goes on the
// driver's record, dispatch starts, members hear ring_serve; under rm.mu.
func (f *Former) serve(ctx context.Context, rm *ringModel, fm *formed) {
	accs := slices.Collect(maps.Values(fm.accepted))
	if err := shard.CheckAccepted(&fm.plan, accs); err != nil {
		f.void(ctx, rm, "acceptances do not check: "+err.Error(), "", nil)
		return
	}
	stop(&rm.deadline)
	if err := f.addToDriver(ctx, rm, fm); err != nil {
		f.log.Warn("ring driver could not be registered", "model", rm.id, "plan", fm.hash, "conn", fm.driver, "err", err)
		f.void(ctx, rm, "stage 0 could not be registered", "", []string{fm.driver})
		return
	}
	fm.serving = true
	rm.live.Store(fm)
	recent := append(slices.Clone(*rm.recent.Load()), fm)
	recent = recent[max(len(recent)-RecentPlans, 0):]
	rm.recent.Store(&recent)
	for _, c := range fm.members {
		f.post(ctx, c.conn, &relaymsg.RingServe{Model: rm.id, Hash: fm.hash})
	}
	f.log.Info("ring serving", "model", rm.id, "plan", fm.hash, "stages", fm.plan.Stages, "driver", fm.driver)
}

// addToDriver registers the ring model on the driver's worker record, with
// the models it serves, and queues dispatch for it; under rm.mu.
func (f *Former) addToDriver(ctx context.Context, rm *ringModel, fm *formed) error {
	w, err := f.cfg.Store.GetWorker(ctx, fm.driver)
	if err != nil {
		return fmt.Errorf("read stage 0's worker record: %w", err)
	}
	if w.Quarantined() {
		// Dispatch gives it canaries only: the ring would show as serving
		// and never take a job.
		return fmt.Errorf("stage 0 (%s) is %s", w.Pubkey, w.Standing)
	}
	models := append(slices.DeleteFunc(slices.Clone(w.Models), func(m string) bool { return m == rm.id }), rm.id)
	caps := maps.Clone(w.Caps)
	if caps == nil {
		caps = map[string]store.Caps{}
	}
	caps[rm.id] = store.Caps{Context: rm.spec.ContextTokens}
	w, err = f.cfg.Store.RegisterWorker(ctx, fm.driver, models, caps)
	if err != nil {
		return fmt.Errorf("register stage 0 for %s: %w", rm.id, err)
	}
	fm.registered = true
	rm.after = append(rm.after, func() {
		f.cfg.Dispatch.Registered(w)
		if _, err := f.cfg.Dispatch.Dispatch(ctx, []string{rm.id}); err != nil {
			f.log.Error("dispatch for a ring", "model", rm.id, "err", err)
		}
	})
	return nil
}

// void ends the current plan: members hear ring_disband (but quiet: one
// that left or refused), the ring model leaves the driver's record (unless
// the record is gone), exclude sit out the next attempt, which waits for
// Debounce; under rm.mu.
func (f *Former) void(ctx context.Context, rm *ringModel, reason, quiet string, exclude []string) {
	fm := rm.cur
	if fm == nil {
		return
	}
	rm.cur = nil
	rm.live.CompareAndSwap(fm, nil)
	stop(&rm.deadline)
	for _, conn := range exclude {
		if _, ok := rm.cands[conn]; ok {
			rm.exclude[conn] = true
		}
	}
	f.log.Warn("ring plan void", "model", rm.id, "plan", fm.hash, "reason", reason, "was_serving", fm.serving)
	if len(reason) > 256 {
		reason = reason[:256]
	}
	for _, c := range fm.members {
		if c.conn != quiet {
			f.post(ctx, c.conn, &relaymsg.RingDisband{Model: rm.id, Hash: fm.hash, Reason: reason})
		}
	}
	if fm.registered {
		if err := f.removeFromDriver(ctx, rm, fm.driver); err != nil {
			f.log.Error("ring model not taken off stage 0's record", "model", rm.id, "conn", fm.driver, "err", err)
		}
	}
	f.schedule(rm, f.cfg.Debounce)
}

func (f *Former) removeFromDriver(ctx context.Context, rm *ringModel, conn string) error {
	w, err := f.cfg.Store.GetWorker(ctx, conn)
	if errors.Is(err, store.ErrNotFound) {
		return nil // gone: its record went with it
	}
	if err != nil {
		return err
	}
	if !w.Serves(rm.id) {
		return nil
	}
	models := slices.DeleteFunc(slices.Clone(w.Models), func(m string) bool { return m == rm.id })
	caps := maps.Clone(w.Caps)
	delete(caps, rm.id)
	_, err = f.cfg.Store.RegisterWorker(ctx, conn, models, caps)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// post sends m to conn; a failure is logged (a gone member's disconnect
// follows and voids what it held).
func (f *Former) post(ctx context.Context, conn string, m any) {
	b, err := relaymsg.Encode(m)
	if err == nil {
		err = f.cfg.Post.Post(ctx, conn, b)
	}
	if err != nil {
		f.log.Warn("ring message not delivered", "conn", conn, "type", fmt.Sprintf("%T", m), "err", err)
	}
}
