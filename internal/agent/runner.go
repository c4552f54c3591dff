package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// Runner runs agents' turn loops; the runner function calls Run once per invocation.
// Any number of invocations may run at once for any agents: the agent's lease (a
// conditional write on its state item) lets one at a time work on an agent.
type Runner struct {
	c *core

	mu   sync.Mutex
	sets map[string]*tools.Set // built tool sets, by the agent's profile override
}

// NewRunner returns a Runner. It returns an error if a required Config field is
// missing.
func NewRunner(cfg Config) (*Runner, error) {
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	return &Runner{c: c, sets: map[string]*tools.Set{}}, nil
}

// Handle is the runner function's handler.
func (r *Runner) Handle(ctx context.Context, ev RunnerEvent) error {
	if ev.Sweep != "" {
		return r.handleSweep(ctx, ev.Sweep)
	}
	if ev.AgentID == "" {
		return errors.New("agent: runner event without agent_id")
	}
	if ev.Expire != "" {
		if _, err := r.Expire(ctx, ev.AgentID, ev.Expire); err != nil {
			return err
		}
	}
	return r.Run(ctx, ev.AgentID)
}

// Run takes agentID's lease and works until the agent is idle (no open turn, no
// waking inject queued) or parked on approvals, then releases the lease — unless a
// stimulus arrived meanwhile, in which case it goes round again. If another
// invocation holds the lease, Run waits until that holder shows it is alive (it
// renews its lease after Run first found it held, and will see this invocation's
// stimulus before it lets go) or its lease expires (it died: Run takes over and
// resumes its turn).
//
// When ctx's deadline is nearer than DeadlineMargin at a step boundary, Run releases
// the lease and invokes the runner function again for the agent; the new invocation
// resumes the open turn from the log, appending nothing for the handover.
//
// Run returns an error when the store, the log or the runner's own invoke fails; the
// turn then stays open (no turn/end), to be resumed by the function's retry or the
// next stimulus. Model and tool failures are not errors: they end the turn failed.
func (r *Runner) Run(ctx context.Context, agentID string) error {
	defer r.c.pause(PauseReturned, agentID)
	return r.newRun(agentID).run(ctx)
}

// newRun returns a new activeRun of r for agentID, with a lease owner id of its
// own.
func (r *Runner) newRun(agentID string) *activeRun {
	rn := &activeRun{r: r, c: r.c, rs: r.c.store, agent: agentID, me: "run_" + randomHex(8)}
	rn.log = rn.newWindow()
	return rn
}

// newWindow is a window on the agent's log not yet begun, appending under rn's lease.
func (rn *activeRun) newWindow() *logWindow {
	return &logWindow{log: rn.c.log, agentID: rn.agent, last: -1, logged: map[string]int64{}, fired: map[string]bool{}, fence: rn.fence}
}

// set returns the built tool set of a profile, building it once per Runner.
func (r *Runner) set(key string, p tools.Profile) (*tools.Set, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sets[key]; ok {
		return s, nil
	}
	s, err := r.c.tools.Build(p)
	if err != nil {
		return nil, err
	}
	if len(r.sets) > 1000 {
		clear(r.sets)
	}
	r.sets[key] = s
	return s, nil
}

type outcome int

const (
	outContinue outcome = iota // the step is done, take the next
	outEnded                   // the turn ended
	outParked                  // the turn waits for verdicts
	outIdle                    // nothing to do
	outHandover                // the invocation's deadline is near
	outCancel                  // a cancel was observed
)

// activeRun is one Run. It holds the agent as it last read it: the state item, the
// log from its checkpoint on and the inbox. The state is read at the start of each pass (the lease
// write returns it) and at each step boundary, and every write of the run's own
// returns it (adopt); the log and the inbox are read again only when the state's
// stimulus count moved since they were last read.
type activeRun struct {
	r      *Runner
	c      *core
	rs     runnerState // the lease and claim rules acquire takes the lease by: c.store
	agent  string
	me     string        // lease owner id of this invocation
	budget time.Duration // time left when the invocation started

	st          state      // the state item as last read or written, set by adopt only
	profileJSON string     // the agent's profile override, read with the lease
	log         *logWindow // the log from the checkpoint on, kept current
	inbox       []inboxItem
	seenPending optional[int64] // the stimulus count the log and inbox were last read at
	// pre is planClaim's read of the inbox, when the lease write that began this
	// invocation also claimed the turn it planned: the first apply takes it instead of
	// reading the inbox and the log again if nothing was queued or done meanwhile.
	pre *preRead

	// ended is the ended turn that reconcile left for the lease release to finish, when
	// nothing else was to happen before it: one state write instead of two.
	ended *endedTurn

	expiredTo int64 // the seq below which this invocation's expire has given events a TTL

	quotaRefused optional[int64] // the stimulus count a quota refusal was logged at
	progressed   bool            // a step ran: handing over now makes progress

	leaseMu  sync.Mutex
	leaseEnd time.Time // when the lease runs out at the latest, by this process's clock
}

// optional is a value that may be absent: none is the zero optional, not a value of T
// set aside to mean it.
type optional[T comparable] struct {
	v  T
	ok bool
}

func some[T comparable](v T) optional[T] { return optional[T]{v: v, ok: true} }

// is reports whether o holds v.
func (o optional[T]) is(v T) bool { return o.ok && o.v == v }

// adopt makes st the invocation's state: the item as a read found it, or as one of the
// invocation's own writes left it (each asks for the item back, at no cost: see
// store.update). It is the only way rn.st changes.
func (rn *activeRun) adopt(st state) { rn.st = st }

func (rn *activeRun) run(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		rn.budget = time.Until(dl)
	}
	st, ok, err := rn.acquire(ctx)
	if err != nil || !ok {
		return err
	}
	if err := rn.crash(CrashAfterAcquire); err != nil {
		return err
	}
	if err := rn.fenceEpoch(ctx, st); err != nil {
		_, _, _ = rn.release(ctx, optional[int64]{}, nil, nil)
		return err
	}
	log := rn.c.logger.With("agent_id", rn.agent, "runner", rn.me)
	runCtx, cancel := context.WithCancel(ctx)
	var lost atomic.Bool
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		rn.heartbeat(runCtx, func() { lost.Store(true); cancel() })
	}()
	stopHeartbeat := func() { cancel(); <-hbDone }
	defer stopHeartbeat()

	for {
		out, err := rn.work(runCtx, st)
		switch {
		case errors.Is(err, ErrCrashed):
			return err
		case lost.Load() || errors.Is(err, errLeaseLost):
			log.WarnContext(ctx, "runner lost its lease; another invocation carries on")
			return nil
		case errors.Is(err, sessionlog.ErrEpoch):
			// The session was reset or deleted under this invocation: its work was on
			// a log that is gone, and none of it is appended to the next one.
			log.WarnContext(ctx, "the log was reset or deleted; the runner's work on it is dropped", "error", err.Error())
			stopHeartbeat()
			if _, _, rerr := rn.release(ctx, optional[int64]{}, nil, nil); rerr != nil {
				log.ErrorContext(ctx, "release lease after the log was reset", "error", rerr.Error())
			}
			return nil
		case err != nil:
			stopHeartbeat()
			if _, _, rerr := rn.release(ctx, optional[int64]{}, nil, nil); rerr != nil {
				log.ErrorContext(ctx, "release lease after failure", "error", rerr.Error())
			}
			return err
		}
		if out == outHandover {
			stopHeartbeat()
			ck := rn.checkpoint(rn.ended)
			_, wrote, err := rn.release(ctx, optional[int64]{}, rn.ended, ck)
			if err != nil {
				return err
			}
			if wrote {
				rn.expire(ctx, ck, log)
			}
			log.InfoContext(ctx, "handing over before the deadline")
			metrics.Add("RunnerHandovers", metrics.Count, 1)
			return rn.c.invoke(ctx, rn.agent)
		}
		if err := rn.crash(CrashBeforeRelease); err != nil {
			return err
		}
		ck := rn.checkpoint(rn.ended)
		released, wrote, err := rn.release(ctx, rn.seenPending, rn.ended, ck)
		if err != nil {
			return err
		}
		if wrote {
			rn.expire(ctx, ck, log)
		}
		if released {
			return nil
		}
		st = rn.st // a stimulus arrived meanwhile: go round again
	}
}

// release gives the lease up (store.release) and adopts the state as the write left it,
// or as it was found when the write did not happen.
// The fold items of the events ck moves past are written first (histfold.go): a
// checkpoint never points above history that is not folded.
func (rn *activeRun) release(ctx context.Context, pending optional[int64], ended *endedTurn, ck *checkpoint) (released, wrote bool, err error) {
	if ck != nil && len(ck.put) > 0 {
		if err := rn.c.store.putFolds(ctx, rn.agent, ck.put); err != nil {
			return false, false, err
		}
	}
	cur, released, wrote, err := rn.c.store.release(ctx, rn.agent, rn.me, pending, ended, ck)
	if err != nil {
		return false, false, err
	}
	rn.adopt(cur)
	if wrote {
		rn.log.wrote(ck)
	}
	return released, wrote, nil
}

// acquire takes the lease, waiting for a live holder to prove itself or a dead one's
// lease to expire, and returns the state item as the lease write left it. It reports
// false when a live holder will see this stimulus. When planClaim finds a turn to
// start, the lease write claims it too.
func (rn *activeRun) acquire(ctx context.Context) (state, bool, error) {
	ttl := rn.c.cfg.LeaseDuration
	c, pre, err := rn.planClaim(ctx)
	if err != nil {
		return state{}, false, err
	}
	var seen *state
	var first time.Time // the first attempt, which found the lease held
	for {
		now, sent := rn.c.now(), time.Now()
		st, ok, err := rn.rs.acquire(ctx, rn.agent, rn.me, now, now.Add(ttl), c)
		if err != nil {
			return state{}, false, err
		}
		if ok {
			rn.extendLease(sent.Add(ttl))
			rn.profileJSON = st.Profile
			if c != nil {
				rn.pre = pre
			}
			return st, true, nil
		}
		if c != nil {
			c = nil
			if st.Runner == "" || st.Runner == rn.me || !lease.LiveMs(st.LeaseUntil, now.UnixMilli()) {
				continue // the lease is free, but the claim no longer holds: take the lease alone
			}
		}
		if seen != nil && (st.Runner != seen.Runner || st.LeaseUntil != seen.LeaseUntil) &&
			st.LeaseUntil > first.Add(ttl).UnixMilli() {
			// The holder renewed (or handed on) after this stimulus was recorded: it
			// will find the stimulus when it tries to release. Only a lease write sent
			// after the first attempt shows that: one a holder sent before it died can
			// be written after that attempt, with an end no later than its time + ttl.
			return state{}, false, nil
		}
		if seen == nil {
			first = now
		}
		seen = &st
		wait := time.UnixMilli(st.LeaseUntil).Sub(now) + 20*time.Millisecond
		wait = max(min(wait, ttl/3+100*time.Millisecond), 10*time.Millisecond)
		if err := sleep(ctx, wait); err != nil {
			return state{}, false, err
		}
	}
}

// planClaim reads the agent before the lease write — its inbox and state item in one
// Query, then the log — so that the write taking the lease can also claim the turn a
// queued wake starts, instead of a write of its own (a cancel racing the start finds
// the turn from that write on, as before). It returns the claim when the lease looks
// free, no turn is recorded or open, a wake not yet logged is queued, and the quota
// allows a turn in the current day and month (a new period's counters are rolled
// over after the lease is taken, and the turn claimed then). Otherwise it returns nil
// and the lease is taken alone; the log read is then skipped when a live holder has
// it. Cost: one strongly consistent Query (usually 1 read unit) and the log read the
// runner makes anyway: when the lease write claims the turn, the first pass takes both
// reads as they are (preRead) instead of making them again.
func (rn *activeRun) planClaim(ctx context.Context) (*claim, *preRead, error) {
	own, pre, err := rn.rs.inboxRead(ctx, rn.agent)
	if err != nil {
		return nil, nil, err
	}
	now := rn.c.now()
	if pre.Runner != "" && pre.Runner != rn.me && lease.LiveMs(pre.LeaseUntil, now.UnixMilli()) {
		return nil, nil, nil
	}
	if pre.TurnID != "" || pre.QuotaDay != now.UTC().Format(time.DateOnly) || pre.QuotaMonth != now.UTC().Format("2006-01") {
		return nil, nil, nil
	}
	prof, err := rn.c.agentProfile(pre.Profile)
	if err != nil || !quotaAllows(prof, pre.Counters, now) {
		return nil, nil, nil // the runner refuses the turn, or fails it on its profile
	}
	if err := rn.log.begin(ctx, rn.c.store, pre); err != nil {
		return nil, nil, err
	}
	if err := rn.log.refresh(ctx); err != nil {
		return nil, nil, err
	}
	if rn.log.turn != nil {
		return nil, nil, nil
	}
	for _, it := range queued(own, pre) {
		if it.Wake && !rn.log.isLogged(it.ID) {
			c := &claim{turnID: newTurnID(), seq: rn.log.last + 1, wake: it, rules: pinnedRules(prof)}
			return c, &preRead{own: own, st: pre}, nil
		}
	}
	return nil, nil, nil
}

// preRead is planClaim's read: the inbox items of their own and the state item, read
// together before the lease write, the log read after them.
type preRead struct {
	own []inboxItem
	st  state
}

// current reports whether the pre-read is still the agent as the lease write st that
// claimed its turn left it, but for that write's own changes. Every inject counts a
// stimulus or reserves its place in the inbox before it is put (Stimuli, InboxItems);
// the read held every item reserved (none was still on its way in: its items number
// InboxItems); and a runner that held the lease in between and did anything metered a
// turn, marked a refusal or moved the checkpoint with its release, while a turn left
// recorded would have failed the claim. A runner that did nothing else may have
// dropped a stale inject, which the first pass finds stale again and drops once more,
// as after a crash.
func (p *preRead) current(st state) bool {
	return int64(len(p.own)) == p.st.InboxItems &&
		st.Stimuli == p.st.Stimuli && st.InboxItems == p.st.InboxItems && st.Counters == p.st.Counters &&
		reflect.DeepEqual(st.Ck, p.st.Ck) && reflect.DeepEqual(st.QuotaRefused, p.st.QuotaRefused)
}

func newTurnID() string { return "turn_" + randomHex(8) }

// heartbeat renews the lease every third of its duration until ctx ends; lost is
// called if the lease turns out to be someone else's.
func (rn *activeRun) heartbeat(ctx context.Context, lost func()) {
	ttl := rn.c.cfg.LeaseDuration
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		err := rn.c.store.renew(ctx, rn.agent, rn.me, rn.c.now().Add(ttl))
		if errors.Is(err, errLeaseLost) {
			lost()
			return
		}
		if err == nil {
			rn.extendLease(sent.Add(ttl))
		}
		if err != nil && ctx.Err() == nil {
			rn.c.logger.WarnContext(ctx, "renew runner lease", "agent_id", rn.agent, "error", err.Error())
		}
	}
}

// extendLease records that the lease lasts at least until end (the time a write that
// took or renewed it was sent, plus its term): it only moves forward.
func (rn *activeRun) extendLease(end time.Time) {
	rn.leaseMu.Lock()
	defer rn.leaseMu.Unlock()
	if end.After(rn.leaseEnd) {
		rn.leaseEnd = end
	}
}

func (rn *activeRun) leaseEnds() time.Time {
	rn.leaseMu.Lock()
	defer rn.leaseMu.Unlock()
	return rn.leaseEnd
}

// fence is what the runner's appends are fenced by (sessionlog.Fence): the epoch of
// the log its window read under the lease, and the lease's end less a tenth of its
// term for clock skew — a reset or delete takes the lease over and waits it out by
// its own clock before it erases, so until then the log cannot start over, and a
// plain put (1 write unit) lands in the log the runner read. When less than half the
// term is left before that (the heartbeat, every third of it, is late), the lease is
// renewed here first; a lease found lost stops the runner (errLeaseLost). When even
// the renewal leaves less than a tenth of the term (DynamoDB answering slower than the
// lease allows), the lease cannot fence the put, and the append is checked by
// DynamoDB instead: a transaction with the check of seq 0 (4 write units), never a
// put the lease might not cover.
func (rn *activeRun) fence(ctx context.Context) (sessionlog.Fence, error) {
	ttl := rn.c.cfg.LeaseDuration
	until := rn.leaseEnds().Add(-ttl / 10)
	if time.Until(until) < ttl/2 {
		sent := time.Now()
		if err := rn.c.store.renew(ctx, rn.agent, rn.me, rn.c.now().Add(ttl)); err != nil {
			return sessionlog.Fence{}, err
		}
		rn.extendLease(sent.Add(ttl))
		until = rn.leaseEnds().Add(-ttl / 10)
	}
	epoch, err := rn.log.epochOf(ctx)
	if err != nil {
		return sessionlog.Fence{}, err
	}
	if time.Until(until) < ttl/10 {
		return sessionlog.Fence{Epoch: epoch}, nil
	}
	return sessionlog.Fence{Epoch: epoch, Until: until}, nil
}

// fenceEpoch makes sure the window is of the log the lease now covers. planClaim reads
// the log before the lease is taken, and a reset or delete may have started the log
// over in between; under the lease it cannot. The lease write returned the state item
// st: its checkpoint names the epoch it was written in (a reset strips it); without
// one, seq 0 is read (1 read unit: a session's first turn). A window that is not
// surely of that log is dropped, and read again under the lease.
func (rn *activeRun) fenceEpoch(ctx context.Context, st state) error {
	if !rn.log.begun {
		return nil // it begins under the lease
	}
	want := ""
	if st.Ck != nil {
		want = st.Ck.Epoch
	}
	if want == "" {
		e, err := rn.c.log.Epoch(ctx, rn.agent)
		if err != nil && !errors.Is(err, sessionlog.ErrNotFound) {
			return fmt.Errorf("agent: epoch of %s: %w", rn.agent, err)
		}
		want = e
	}
	if want != "" && rn.log.epoch == want {
		return nil
	}
	rn.log = rn.newWindow()
	rn.seenPending = optional[int64]{}
	rn.pre = nil
	return nil
}

// crashed asks Config.Crash whether to stop at point (tests).
func (c *core) crashed(point string) bool {
	return c.cfg.Crash != nil && c.cfg.Crash(point)
}

func (rn *activeRun) crash(point string) error {
	if rn.c.cfg.Crash != nil && rn.c.cfg.Crash(point) {
		return ErrCrashed
	}
	return nil
}

// deadlineNear reports whether the invocation should hand over: it has made progress
// and has less than its margin left. The margin is DeadlineMargin, but at most half
// the time the invocation started with, so a function configured with a short
// timeout still does several steps per invocation instead of one.
func (rn *activeRun) deadlineNear(ctx context.Context) bool {
	if !rn.progressed {
		return false
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	margin := min(rn.c.cfg.DeadlineMargin, rn.budget/2)
	return time.Until(dl) < margin
}

// apply takes in a state read: a stimulus counted since the last one makes the
// invocation read the log tail and the inbox. The first apply reads both (no count
// seen yet), unless the lease write claimed the turn planClaim read for and the agent
// is as planClaim read it (preRead.current).
func (rn *activeRun) apply(ctx context.Context, st state) error {
	if st.Runner != rn.me {
		return errLeaseLost
	}
	rn.adopt(st)
	if rn.seenPending.is(st.Stimuli) {
		return nil
	}
	if pre := rn.pre; pre != nil {
		rn.pre = nil
		if rn.log.begun && pre.current(st) {
			// The first pass, which planClaim read for: its log and inbox are current.
			rn.seenPending = some(st.Stimuli)
			rn.setInbox(queued(pre.own, st))
			return nil
		}
	}
	if err := rn.log.begin(ctx, rn.c.store, st); err != nil {
		return err
	}
	if err := rn.log.refresh(ctx); err != nil {
		return err
	}
	items, _, err := rn.c.store.inbox(ctx, rn.agent)
	if err != nil {
		return err
	}
	rn.seenPending = some(st.Stimuli)
	rn.setInbox(items)
	return nil
}

// boundary refreshes the state at a step boundary: one consistent read of the state
// item, plus the log tail and inbox when a stimulus arrived.
func (rn *activeRun) boundary(ctx context.Context) error {
	st, err := rn.c.store.getState(ctx, rn.agent, boundaryAttrs...)
	if err != nil {
		return err
	}
	return rn.apply(ctx, st)
}

// append appends one event to the agent's log.
func (rn *activeRun) append(ctx context.Context, typ string, payload any) (sessionlog.Event, error) {
	return rn.log.append(ctx, typ, payload)
}

// setInbox keeps items as the inbox, but for the recorded turn's inline wake once it
// is logged: that one leaves the state item with the turn, and is not drained.
func (rn *activeRun) setInbox(items []inboxItem) {
	rn.inbox = slices.DeleteFunc(items, func(it inboxItem) bool { return it.attr == attrTurnWake && rn.log.isLogged(it.ID) })
}

// nextWake is the waking inject the next turn starts with: the one a recorded claim
// that logged nothing yet was made for (its key is turn_key), else the oldest.
func (rn *activeRun) nextWake() *inboxItem {
	if rn.st.TurnID != "" && rn.st.TurnKey != "" {
		for i := range rn.inbox {
			if it := &rn.inbox[i]; it.Wake && !rn.log.isLogged(it.ID) && it.key() == rn.st.TurnKey {
				return it
			}
		}
	}
	return rn.oldestWake()
}

// oldestWake is the first queued inject that asks for a turn and is not logged yet.
func (rn *activeRun) oldestWake() *inboxItem {
	for i := range rn.inbox {
		if it := &rn.inbox[i]; it.Wake && !rn.log.isLogged(it.ID) {
			return it
		}
	}
	return nil
}

// toolset is the agent's profile and its built tools.
func (rn *activeRun) toolset() (tools.Profile, *tools.Set, error) {
	prof, err := rn.c.agentProfile(rn.profileJSON)
	if err != nil {
		return tools.Profile{}, nil, err
	}
	// Keyed by the tools themselves: an edited default profile builds a new set.
	key, err := json.Marshal(prof.Tools)
	if err != nil {
		return tools.Profile{}, nil, err
	}
	set, err := rn.r.set(string(key), prof)
	if err != nil {
		return tools.Profile{}, nil, err
	}
	return prof, set, nil
}
