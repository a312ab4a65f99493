package rings

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// Message handles a member's ring message (ring_announce, ring_rtt,
// ring_ready, ring_refuse) from conn, and returns the reply for it: nil,
// or an error message saying what is wrong and how to fix it. A refused
// message changes nothing.
func (f *Former) Message(ctx context.Context, conn string, m any) []byte {
	var model string
	switch m := m.(type) {
	case *relaymsg.RingAnnounce:
		model = m.Model
	case *relaymsg.RingRTT:
		model = m.Model
	case *relaymsg.RingReady:
		model = m.Model
	case *relaymsg.RingRefuse:
		model = m.Model
	default:
		return errorReply(CodeUnexpected, fmt.Sprintf("%T is not a ring message a member sends", m))
	}
	rm, ok := f.model(model)
	if !ok {
		return errorReply(CodeNotRegistered, fmt.Sprintf("%q is not a ring model of this gateway", model))
	}
	f.mu.Lock()
	reg := f.regs[conn]
	f.mu.Unlock()
	if reg == nil || !reg.models[rm.id] {
		return errorReply(CodeNotRegistered, fmt.Sprintf("this connection did not register ring model %q: list it in register and wait for registered before announcing", rm.id))
	}
	if _, ok := m.(*relaymsg.RingAnnounce); ok {
		// Read before rm.mu: a store call must not hold up formation.
		if reply := f.refuseStanding(ctx, rm, conn, reg); reply != nil {
			return reply
		}
	}
	var reply []byte
	f.locked(rm, func() {
		// Left (or a new registration) may have come in between: it
		// changes the registration before it takes rm.mu.
		f.mu.Lock()
		same := f.regs[conn] == reg
		f.mu.Unlock()
		if !same {
			reply = errorReply(CodeNotRegistered, fmt.Sprintf("this connection's registration of %q changed while its message was handled: send it again", rm.id))
			return
		}
		switch m := m.(type) {
		case *relaymsg.RingAnnounce:
			reply = f.announce(ctx, rm, conn, reg, m)
		case *relaymsg.RingRTT:
			reply = f.rtt(ctx, rm, conn, reg, m)
		case *relaymsg.RingReady:
			reply = f.ready(ctx, rm, conn, reg, m)
		case *relaymsg.RingRefuse:
			reply = f.refuse(ctx, rm, conn, reg, m)
		}
	})
	return reply
}

func (f *Former) announce(ctx context.Context, rm *ringModel, conn string, reg *registration, m *relaymsg.RingAnnounce) []byte {
	c := m.Capability
	if err := c.Check(); err != nil {
		return errorReply(CodeBadRecord, fmt.Sprintf("capability for %q: %v", rm.id, err))
	}
	if c.Node != reg.node {
		return errorReply(CodeBadRecord, fmt.Sprintf("capability for %q is signed by %s, but this connection connected as %s: sign it with the worker's identity key", rm.id, c.Node, reg.node))
	}
	if c.Model != rm.offer.Hash {
		return errorReply(CodeBadRecord, fmt.Sprintf("capability measures model %s, but %q is manifest %s: fetch %s/manifest.json again", c.Model, rm.id, rm.offer.Hash, rm.spec.BlobURL))
	}
	if err := f.checkAddr(m.Advertise); err != nil {
		return errorReply(CodeBadRecord, err.Error())
	}
	now := f.cfg.Now()
	touched := []string{conn}
	if old, known := rm.cands[conn]; known {
		if sameAnnouncement(old, c, m.Advertise) {
			return nil // nothing changed: no new wait, no probe dropped
		}
		if next := old.changed.Add(f.cfg.ChangeInterval); now.Before(next) {
			return errorReply(CodeRateLimited, fmt.Sprintf("this connection's announcement for %q changed %v ago, and one may change at most once every %v: announce again in %v",
				rm.id, now.Sub(old.changed), f.cfg.ChangeInterval, next.Sub(now)))
		}
	} else {
		var rival *candidate
		for _, o := range rm.cands {
			if o.node == c.Node {
				rival = o
			}
		}
		switch {
		case rival != nil && reg.connected.Before(rival.connected):
			return errorReply(CodeBadRecord, fmt.Sprintf("identity %s is a candidate for %q on connection %s, which connected after this one: announce on the newest connection only", c.Node, rm.id, rival.conn))
		case rival != nil:
			f.replace(ctx, rm, rival, conn)
			touched = append(touched, rival.conn)
		case len(rm.cands) >= MaxCandidates:
			return errorReply(CodeFull, fmt.Sprintf("%q has %d candidates, the most a ring is formed from: announce again later", rm.id, MaxCandidates))
		}
	}
	rm.cands[conn] = &candidate{conn: conn, account: reg.account, pubkey: reg.pubkey, tokenHash: reg.tokenHash, connected: reg.connected,
		node: c.Node, cap: c, addr: m.Advertise, changed: now}
	rm.seq++
	f.log.Info("ring candidate", "model", rm.id, "conn", conn, "node", c.Node, "candidates", len(rm.cands))
	f.changed(rm, touched...)
	return nil
}

// sameAnnouncement reports whether c at addr announces what old did: the
// same signer, model, memory, layer time, uplink, stake and trust, at the
// same address. Only the record's time and signature differ.
func sameAnnouncement(old *candidate, c shard.Capability, addr string) bool {
	a, b := old.cap, c
	a.Time, a.Sig, b.Time, b.Sig = 0, shard.Signature{}, 0, shard.Signature{}
	return a == b && old.addr == addr
}

// replace drops rival, the candidate of the same identity on an older
// connection, for the announcement on conn (the member rolled its relay
// connection): a plan it holds a place in is void — its address may have
// changed with the connection — and the ring re-forms with the new
// connection. The old connection's disconnect then changes nothing. Under
// rm.mu.
func (f *Former) replace(ctx context.Context, rm *ringModel, rival *candidate, conn string) {
	delete(rm.cands, rival.conn)
	delete(rm.exclude, rival.conn)
	f.log.Info("ring candidate moved to a newer connection", "model", rm.id, "node", rival.node, "old_conn", rival.conn, "conn", conn)
	if fm := rm.cur; fm != nil && fm.members[rival.node] != nil {
		f.void(ctx, rm, fmt.Sprintf("member %s moved to a new connection", rival.node), "", nil)
	}
}

// refuseStanding is the reply to an announcement from a connection whose
// identity or token is not in good standing, or nil.
func (f *Former) refuseStanding(ctx context.Context, rm *ringModel, conn string, reg *registration) []byte {
	st, err := f.standing(ctx, conn, reg.account, reg.pubkey)
	if err != nil {
		f.log.Error("ring announcement: standing unknown", "model", rm.id, "conn", conn, "err", err)
		return errorReply(CodeUnavailable, fmt.Sprintf("the gateway could not read this connection's standing for %q: announce again in a minute", rm.id))
	}
	if st != store.StandingActive {
		f.log.Info("ring announcement refused: not in good standing", "model", rm.id, "conn", conn, "node", reg.node, "standing", st)
		return errorReply(CodeStanding, fmt.Sprintf("identity %s (or its worker token) is %s, and a ring of %q takes only workers in good standing: pass the canaries sent to it, then announce again", reg.node, st, rm.id))
	}
	return nil
}

// standing is where a member stands: the worse of its live worker
// record's standing (its identity's and its token's, as of its connect
// and every verdict since) and its identity's reputation on account,
// which a verdict on another connection of the identity changes at once
// and which outlives the connection. A connection that is gone is judged
// by the reputation alone.
func (f *Former) standing(ctx context.Context, conn, account, pubkey string) (store.Standing, error) {
	st := store.StandingActive
	w, err := f.cfg.Store.GetWorker(ctx, conn)
	switch {
	case err == nil:
		st = store.Worse(st, w.Standing)
	case !errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("read worker %s: %w", conn, err)
	}
	rep, err := f.cfg.Store.GetReputation(ctx, account, pubkey)
	if err != nil {
		return "", fmt.Errorf("read the reputation of %s on account %s: %w", pubkey, account, err)
	}
	return store.Worse(st, rep.Standing), nil
}

// sharedSpace and thisNetwork are IPv4 ranges netip has no predicate for
// that no stage elsewhere can dial: carrier-grade NAT (RFC 6598) and
// "this network" (RFC 791).
var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// checkAddr accepts host:port with a port in 1..65535; unless
// AllowPrivateAddrs, the host must be a public IP literal.
func (f *Former) checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err == nil {
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 || host == "" {
			err = errors.New("want a host and a port 1-65535")
		}
	}
	if err != nil {
		return fmt.Errorf("advertise %q is not host:port (%v): give the address other stages dial, e.g. 203.0.113.7:7443", a, err)
	}
	if f.cfg.AllowPrivateAddrs {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return fmt.Errorf("advertise %q: %q is not an IP address: give the public IP other stages dial (this gateway takes no host names: one could resolve anywhere), e.g. 203.0.113.7:7443", a, host)
	}
	if kind := nonPublic(ip.Unmap()); kind != "" {
		return fmt.Errorf("advertise %q is a %s address, which stages on other networks cannot dial: advertise the member's public IP and forward its stage port there", a, kind)
	}
	return nil
}

// nonPublic names the kind of ip when it is not a public unicast address,
// else "".
func nonPublic(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified() || ip.Is4() && thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case ip.Is4() && sharedSpace.Contains(ip):
		return "shared (carrier-grade NAT)"
	case !ip.IsGlobalUnicast():
		return "broadcast"
	}
	return ""
}

func (f *Former) rtt(ctx context.Context, rm *ringModel, conn string, reg *registration, m *relaymsg.RingRTT) []byte {
	row := m.Row
	if err := row.Check(); err != nil {
		return errorReply(CodeBadRecord, fmt.Sprintf("rtt row for %q: %v", rm.id, err))
	}
	if row.From != reg.node {
		return errorReply(CodeBadRecord, fmt.Sprintf("rtt row for %q is measured by %s, but this connection connected as %s: sign it with the worker's identity key", rm.id, row.From, reg.node))
	}
	p := rm.probe
	if p == nil || !slices.Contains(p.conns, conn) {
		return errorReply(CodeStale, fmt.Sprintf("no probe of %q waits for this connection's row (a newer attempt replaced it): answer the latest ring_probe", rm.id))
	}
	for _, peer := range row.Peers {
		if c, ok := p.nodes[peer.To]; !ok || c == conn {
			return errorReply(CodeBadRecord, fmt.Sprintf("rtt row for %q measures %s, which the probe did not list: measure only the probe's peers", rm.id, peer.To))
		}
	}
	p.rows[conn] = row
	if len(p.rows) == len(p.conns) {
		f.plan(ctx, rm)
	}
	return nil
}

func (f *Former) ready(ctx context.Context, rm *ringModel, conn string, reg *registration, m *relaymsg.RingReady) []byte {
	a := m.Acceptance
	fm := rm.cur
	if fm == nil || a.Plan != fm.hash {
		return errorReply(CodeStale, fmt.Sprintf("acceptance of plan %s, but %q's current plan is %s: drop that plan", a.Plan, rm.id, currentHash(fm)))
	}
	mem, ok := fm.memberConn(conn)
	if !ok {
		return errorReply(CodeStale, fmt.Sprintf("this connection holds no place in plan %s of %q", fm.hash, rm.id))
	}
	if fm.serving {
		return nil // a repeated ready: the ring serves already
	}
	var err error
	if err = a.Check(); err == nil && a.Node != mem.node {
		err = fmt.Errorf("signed by %s, but this connection connected as %s", a.Node, mem.node)
	}
	if err == nil {
		if _, placed := fm.accepted[a.Node]; placed {
			return nil
		}
		for _, pm := range fm.plan.Members {
			if pm.Node == mem.node && (pm.Stage != a.Stage || pm.Role != a.Role) {
				err = fmt.Errorf("accepts stage %d as %s, the plan has stage %d as %s", a.Stage, a.Role, pm.Stage, pm.Role)
			}
		}
	}
	if err != nil {
		f.void(ctx, rm, fmt.Sprintf("invalid acceptance from %s", mem.node), "", []string{conn})
		return errorReply(CodeBadRecord, fmt.Sprintf("acceptance of plan %s of %q: %v; the plan is void", fm.hash, rm.id, err))
	}
	fm.accepted[a.Node] = a
	f.log.Info("ring member ready", "model", rm.id, "plan", fm.hash, "node", a.Node, "ready", len(fm.accepted), "members", len(fm.plan.Members))
	if len(fm.accepted) == len(fm.plan.Members) {
		f.serve(ctx, rm, fm)
	}
	return nil
}

func currentHash(fm *formed) string {
	if fm == nil {
		return "none"
	}
	return fm.hash.String()
}

func (f *Former) refuse(ctx context.Context, rm *ringModel, conn string, reg *registration, m *relaymsg.RingRefuse) []byte {
	fm := rm.cur
	if fm == nil || m.Hash != fm.hash {
		return errorReply(CodeStale, fmt.Sprintf("refusal of plan %s, but %q's current plan is %s", m.Hash, rm.id, currentHash(fm)))
	}
	if _, ok := fm.memberConn(conn); !ok {
		return errorReply(CodeStale, fmt.Sprintf("this connection holds no place in plan %s of %q", fm.hash, rm.id))
	}
	f.log.Warn("ring member refused its plan", "model", rm.id, "plan", fm.hash, "node", reg.node, "code", m.Code)
	f.void(ctx, rm, fmt.Sprintf("%s refused: %s", reg.node, m.Code), conn, []string{conn})
	return nil
}

// Left forgets a connection that is gone: it is no longer a candidate, and
// a plan it held a place in is void (the others are told, and the ring
// re-forms from the candidates still connected).
func (f *Former) Left(ctx context.Context, conn string) {
	f.mu.Lock()
	reg := f.regs[conn]
	delete(f.regs, conn)
	f.mu.Unlock()
	if reg == nil {
		return
	}
	for id := range reg.models {
		if rm, ok := f.model(id); ok {
			f.locked(rm, func() { f.leave(ctx, rm, conn) })
		}
	}
}

// leave drops conn from rm; under rm.mu. A plan member leaving voids the
// plan, except a standby or verifier of a serving ring: only primaries
// carry its jobs.
func (f *Former) leave(ctx context.Context, rm *ringModel, conn string) {
	_, was := rm.cands[conn]
	delete(rm.cands, conn)
	delete(rm.exclude, conn)
	if fm := rm.cur; fm != nil {
		if c, member := fm.memberConn(conn); member {
			role := fm.role(c.node)
			if !fm.serving || role == shard.RolePrimary {
				f.void(ctx, rm, fmt.Sprintf("member %s left", c.node), conn, nil)
				return
			}
			f.log.Info("ring member left; the ring serves on without it", "model", rm.id, "plan", fm.hash, "node", c.node, "role", role)
		}
	}
	if was {
		f.changed(rm, conn)
	}
}

func errorReply(code, msg string) []byte {
	b, err := relaymsg.Encode(&relaymsg.Error{Code: code, Message: msg})
	if err != nil {
		b, _ = relaymsg.Encode(&relaymsg.Error{Code: code, Message: "message too long to send"})
	}
	return b
}
