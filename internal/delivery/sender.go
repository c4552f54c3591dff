package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// lingerFor is how long a fast-path sender keeps its lease for the appender's next
// event: longer than the gap between a streamed answer's chunks (the runtime flushes
// every 200 ms), and shorter than a backstop wake-up's own looks (watchLooks), so that
// one meeting a lingering sender sees it let go instead of starting a watcher.
const lingerFor = 250 * time.Millisecond

// lingerLook is how often a lingering sender looks at the record: a resubscribe or
// another process's Pending mark waits no longer than this for it.
const lingerLook = time.Second

// sender is the lease holder of one ownership record, from the Acquire that made it
// one to finish. It posts one frame at a time, each awaited, and every write it makes
// to the record is conditional on still holding the lease (Store.Checkpoint, Release,
// Abandon). Its state is the record as last written or read under the lease (o), the
// progress made (p, of which up to CheckpointEvery events may be unrecorded) and
// where it is in its lifecycle (st: lifecycle.go), which says among other things
// whether the lease is still its own. Not safe for concurrent use.
type sender struct {
	d      *Deliverer
	ctx    context.Context
	lg     *slog.Logger
	holder string
	w      wake

	o connections.Owner    // the record; o.Sub is the subscription being served
	p connections.Progress // progress made under the lease, ahead of o

	hints  []sessionlog.Event // events that woke this sender, if next in line
	stopAt time.Time          // when a sender still busy hands over (zero: never)
	looked time.Time          // when a lingering sender last looked at the record

	unrecorded int                 // events posted since the last cursor write began
	pageEnd    int64               // one past the last event of the batch being posted
	half       int                 // CheckpointEvery/2: the most events of one batch
	stored     int64               // the cursor as last stored: p.Next of the last write that answered
	inflight   chan checkpointDone // a cursor write under way (checkpoint.go), or nil
	slotsBack  []chan struct{}     // replay reads and slots being given back (replay.go), closed when done
	ahead      *readAhead          // the replay read begun one page ahead (replay.go), or nil
	slot       slotLease           // a replay slot kept from the last read for the next one
	// st is where the sender is in its lifecycle (lifecycle.go); fire alone changes it.
	st    senderState
	tally tally // posts not yet reported to a DeliveryObserver (observe.go)
}

func (d *Deliverer) newSender(ctx context.Context, o connections.Owner, holder string, hints []sessionlog.Event, w wake) *sender {
	st := stateSending
	if !o.HelloSent {
		st = stateGreeting
	}
	return &sender{st: st,
		d: d, ctx: ctx, holder: holder, w: w, o: o, hints: hints,
		lg:     d.logger.With("agent_id", o.AgentID, "connection_id", o.ConnID),
		p:      connections.Progress{Next: o.Next, HelloSent: o.HelloSent, Truncated: o.Truncated},
		stopAt: w.stopAt, looked: time.Now(),
		half: max(d.cfg.CheckpointEvery/2, 1), stored: o.Next, slot: noSlot,
	}
}

// run is step 3 and 4 of the pump (docs/architecture.md, "Delivery"): hello if owed,
// then events from the cursor, until the log has nothing more and the lease can be let
// go (release). It does the step of the state the sender is in until the lease is no
// longer its own (lifecycle.go); each step ends in an event into the lifecycle, or in
// an error that ends the sender.
func (s *sender) run() (err error) {
	began, first := time.Now(), s.p.Next
	defer s.finish(&err, began, first)
	for s.st.holds() {
		if err := s.step(); err != nil {
			return err
		}
	}
	return nil
}

// step does the work of the sender's state.
func (s *sender) step() error {
	switch s.st {
	case stateGreeting:
		return s.hello()
	case stateSending, stateResubscribed:
		return s.round()
	case stateLingering:
		return s.linger()
	case stateReleasing:
		return s.release()
	}
	return fmt.Errorf("%w: no step in state %s", errTransition, s.st)
}

// round is one round of sending: the replies owed right after hello, then the events
// owed from the cursor. A round that finds everything sent goes idle (idle); one that
// read events from the log, or found a resubscribe, leaves the next round to read
// again, as there may be more.
func (s *sender) round() error {
	if err := s.fire(evRound); err != nil {
		return err
	}
	if len(s.o.Replies) > 0 { // owed right after hello (welcome.go)
		if closed, err := s.postReplies(); err != nil || closed {
			return err
		}
	}
	batch, fromHints, err := s.next()
	if err != nil {
		return err
	}
	if s.st == stateResubscribed {
		return nil // read for the replaced subscription: the next round reads from the new cursor
	}
	if len(batch) == 0 {
		if s.owesTruncated() {
			// A subscribe past the tip of an idle log: the next event may be hours
			// away, and the client must not wait for it to learn where its stream
			// starts. The same post as with that event; release records it sent.
			if err := s.postTruncated(); err != nil {
				return err
			}
		}
		return s.idle()
	}
	if err := s.sendBatch(batch); err != nil {
		return err
	}
	if !s.st.holds() || s.st == stateResubscribed || !fromHints {
		return nil // closed as lagged, or there may be more in the log
	}
	return s.idle()
}

// sendBatch posts batch from the cursor, or closes the connection as lagged when its
// live tail is past the bound, and takes the outcome of a cursor write that answered
// meanwhile (a resubscribe it found shows in the state).
func (s *sender) sendBatch(batch []sessionlog.Event) error {
	if s.p.Next >= s.o.ReplayEnd && s.d.lagging(s.p.Next, batch) {
		return s.closeLagged()
	}
	if err := s.postEvents(batch); errors.Is(err, errLagging) {
		return s.closeLagged()
	} else if err != nil {
		return err
	}
	if s.d.nearDeadline(s.ctx) {
		return errDeadline
	}
	return s.poll()
}

// idle follows a round that left nothing owed: the sender lingers for the appender's
// next events if its wake-up lets it (mayLinger), and lets the lease go otherwise.
// A resubscribe found on the way means another round instead.
func (s *sender) idle() error {
	s.reportSent()
	switch {
	case s.st == stateResubscribed:
		return nil
	case s.mayLinger():
		return s.fire(evLinger)
	}
	return s.fire(evRelease)
}

// reportSent tells the wake-up's sent, if any, that everything before the cursor is
// sent.
func (s *sender) reportSent() {
	if s.w.sent != nil {
		s.w.sent(s.p.Next)
	}
}

// finish is the one way out of run. A sender that ran out of time hands its work to
// a fresh invocation, and one whose connection is gone forgets it; any sender still
// holding the lease then leaves the progress made so that the next sender continues
// from it.
func (s *sender) finish(err *error, began time.Time, first int64) {
	s.dropAhead()
	s.giveBackSlot()
	for _, done := range s.slotsBack {
		<-done
	}
	switch {
	case errors.Is(*err, errDeadline):
		*err = s.handover()
	case errors.Is(*err, ErrGone):
		s.lg.InfoContext(s.ctx, "connection gone")
		*err = s.d.store.Forget(s.ctx, s.o.ConnID, s.o.Key())
	}
	if s.st.holds() {
		_ = s.join()
	}
	if s.st.holds() {
		if aerr := s.d.store.Abandon(context.WithoutCancel(s.ctx), s.o, s.holder, s.p); aerr != nil {
			s.lg.ErrorContext(s.ctx, "abandon lease", "error", aerr)
		} else {
			_ = s.fire(evAbandon)
		}
	}
	s.report()
	s.lg.DebugContext(s.ctx, "sender done", "from_seq", first, "next_seq", s.p.Next, "duration_ms", time.Since(began).Milliseconds(), "error", *err)
}

// adopt takes cur, the record as a write under the lease returned it. It is the one
// place a resubscribe is noticed (evResubscribe): the new subscription's cursor
// replaces the progress made for the old one, and a page read ahead for the old one is
// dropped.
func (s *sender) adopt(cur connections.Owner) error {
	resubscribed := cur.Sub != s.o.Sub
	if resubscribed {
		s.dropAhead()
		s.p = connections.Progress{Next: cur.Next, HelloSent: s.p.HelloSent || cur.HelloSent, Truncated: cur.Truncated}
		s.unrecorded, s.stored = 0, cur.Next
	}
	s.o = cur
	if resubscribed {
		return s.fire(evResubscribe)
	}
	return nil
}

// lost notes an error of a write under the lease: ErrLeaseLost means another holder
// (or nobody, the record gone) has it now (evLeaseLost).
func (s *sender) lost(err error) error {
	if errors.Is(err, connections.ErrLeaseLost) {
		if ferr := s.fire(evLeaseLost); ferr != nil {
			return errors.Join(err, ferr)
		}
	}
	return err
}

// join waits for the cursor write under way, if any, and adopts what it returned.
func (s *sender) join() error {
	if s.inflight == nil {
		return nil
	}
	return s.takeCheckpoint(<-s.inflight)
}

// poll adopts the outcome of the cursor write under way if it has answered, without
// waiting: a lease lost or a resubscribe is noticed before the next post.
func (s *sender) poll() error {
	if s.inflight == nil {
		return nil
	}
	select {
	case r := <-s.inflight:
		return s.takeCheckpoint(r)
	default:
		return nil
	}
}

// takeCheckpoint takes the outcome of a cursor write made in the background.
func (s *sender) takeCheckpoint(r checkpointDone) error {
	s.inflight = nil
	if r.err != nil {
		return s.lost(r.err)
	}
	s.stored = max(s.stored, r.p.Next)
	return s.adopt(r.cur)
}

// checkpoint writes the progress and extends the lease, waiting for the outcome.
func (s *sender) checkpoint() error {
	if err := s.join(); err != nil {
		return err
	}
	cur, err := s.d.store.Checkpoint(s.ctx, s.o, s.holder, s.p, s.d.cfg.Lease)
	if err != nil {
		return s.lost(err)
	}
	s.stored, s.unrecorded = s.p.Next, 0
	return s.adopt(cur)
}

// leaseLeft is how long the lease runs on, on the records' clock.
func (s *sender) leaseLeft() time.Duration { return s.o.LeaseUntil.Sub(s.d.store.Now()) }

// renew readies the lease and the cursor for the next post. A sender never posts on a
// lease with less than half its term left, so a slow sender stops (ErrLeaseLost)
// rather than overlapping the next one; and never more than CheckpointEvery events
// beyond its stored cursor, which bounds what a successor re-sends should it die (an
// unavoidable window: a post and the write recording it cannot be one atomic step).
//
// The cursor write does not hold up the posts: one write at a time goes on in the
// background (checkpoint.go), begun once CheckpointEvery/4 events went out since the
// last one began, or once a quarter of the lease's term has passed with
// events unrecorded. renew takes its
// answer before the next post once it has come (poll), and waits for it only when the
// next post would break one of the two bounds above. A lease lost or a resubscribe is
// thus noticed before the first post after the write that finds it has answered; the
// frames posted while it was in flight are within both bounds.
func (s *sender) renew() error {
	if err := s.poll(); err != nil {
		return err
	}
	lease, every := s.d.cfg.Lease, int64(s.d.cfg.CheckpointEvery)
	if s.leaseLeft() <= lease/2 || s.p.Next-s.stored >= every {
		if err := s.join(); err != nil {
			return err
		}
		if s.leaseLeft() <= lease/2 || s.p.Next-s.stored >= every {
			return s.checkpoint()
		}
	}
	if s.inflight == nil && s.unrecorded > 0 && (s.writeDue() || s.leaseLeft() <= lease*3/4) {
		s.inflight, s.unrecorded = s.checkpointAsync(), 0
	}
	return nil
}

// writeDue reports whether the events posted call for a background cursor write:
// every CheckpointEvery/4 events on the live tail. A replay page's write begins at the
// page's end, before the next page's read (read); within a page one is due only if
// the page runs past CheckpointEvery beyond the stored cursor.
func (s *sender) writeDue() bool {
	if s.p.Next < s.o.ReplayEnd && s.pageEnd-s.stored <= int64(s.d.cfg.CheckpointEvery) {
		return false
	}
	return s.unrecorded >= max(s.half/2, 1)
}

// room is how many events the next post may carry: at most CheckpointEvery/2, and no
// more than keeps the posted events within CheckpointEvery of the stored cursor. After
// renew it is at least 1.
func (s *sender) room() int {
	return int(min(int64(s.half), int64(s.d.cfg.CheckpointEvery)-(s.p.Next-s.stored)))
}

// pastStop reports whether a sender with a budget has run out of it.
func (s *sender) pastStop() bool { return !s.stopAt.IsZero() && time.Now().After(s.stopAt) }

// hello posts hello and records it; the record that write returns carries the error
// replies owed right after hello (run posts them). A lease lost on the way may mean
// the connection was superseded meanwhile: the claim then made this sender its closer
// (unwelcomed).
func (s *sender) hello() error {
	hello, err := s.d.helloFrame(s.ctx, s.o.AgentID, s.o.Role())
	if err != nil {
		return err
	}
	if err := s.renew(); err != nil {
		return s.unwelcomed(err, false)
	}
	s.d.gate(GateHello, s.o.AgentID)
	if err := s.fire(evPost); err != nil {
		return err
	}
	if err := s.d.postHello(s.ctx, s.o.ConnID, hello, true); err != nil {
		return err
	}
	s.p.HelloSent = true
	if err := s.fire(evHelloPosted); err != nil {
		return err
	}
	if err := s.checkpoint(); err != nil {
		return s.unwelcomed(err, true)
	}
	return nil
}

// next returns the events owed from the cursor on: the hints that woke the sender when
// they start exactly there (fromHints, no read), otherwise a log read. Nothing is owed
// to a connection not subscribed.
func (s *sender) next() (batch []sessionlog.Event, fromHints bool, err error) {
	if s.o.Sub == 0 {
		return nil, false, nil
	}
	batch, fromHints = take(s.hints, s.p.Next)
	s.hints = nil
	if fromHints {
		return batch, true, nil
	}
	if s.pastStop() {
		return nil, false, errDeadline
	}
	batch, err = s.read(s.p.Next)
	return batch, false, err
}

// owesTruncated reports whether replay_truncated is owed before the next event.
func (s *sender) owesTruncated() bool { return s.p.Truncated && s.p.Next == s.o.From }

// postTruncated posts the replay_truncated the subscription owes: 1 post, no write of
// its own (the next checkpoint or the release records it sent).
func (s *sender) postTruncated() error {
	if err := s.renew(); err != nil {
		return err
	}
	if err := s.post(protocol.Marshal(protocol.NewReplayTruncated(s.o.Requested, s.o.From))); err != nil {
		return err
	}
	s.p.Truncated = false
	s.tally.Truncated++
	return nil
}

// postEvents posts batch in order — replay_truncated first if it is owed here — one
// event per post, or several for a batching client (batch.go). It stops early if the
// record turns out to serve a newer subscription: the rest of batch belongs to the old
// one.
func (s *sender) postEvents(batch []sessionlog.Event) error {
	if s.owesTruncated() {
		if err := s.postTruncated(); err != nil {
			return err
		}
	}
	live := s.p.Next >= s.o.ReplayEnd
	s.pageEnd = batch[len(batch)-1].Seq + 1
	for i := 0; i < len(batch); {
		b, k, err := s.nextFrame(batch[i:])
		if err != nil || k == 0 {
			return err // k == 0: resubscribed
		}
		if err := s.postFrame(b, live); err != nil {
			return err
		}
		s.counted(batch[i : i+k])
		i += k
		s.p.Next = batch[i-1].Seq + 1
		s.unrecorded += k
		s.reportSent()
		if s.pastStop() {
			return errDeadline
		}
	}
	return nil
}

// nextFrame readies the lease and the cursor for the next post (renew) and returns the
// frame of the first k events of rest it may carry; k is 0, and no frame, once the
// record turns out to serve a newer subscription.
func (s *sender) nextFrame(rest []sessionlog.Event) (b []byte, k int, err error) {
	if err := s.renew(); err != nil {
		return nil, 0, err
	}
	if s.st == stateResubscribed {
		return nil, 0, nil
	}
	if b, k, err = frame(rest, s.o.Batch, s.half); err != nil || k <= s.room() {
		return b, k, err
	}
	// The CheckpointEvery bound cuts this batch short. A short batch costs a post; the
	// cursor write under way, if any, lifts the bound when it answers.
	if err := s.join(); err != nil {
		return nil, 0, err
	}
	if s.st == stateResubscribed {
		return nil, 0, nil
	}
	if room := s.room(); k > room {
		return frame(rest, s.o.Batch, room)
	}
	return b, k, nil
}

// postFrame posts b, a frame of events from the cursor on; on the live tail the bound
// is watched while the post waits (lagged.go), and a frame refused as the reader's
// buffer full (ErrFull) past the bound is errLagging.
func (s *sender) postFrame(b []byte, live bool) error {
	if !live {
		return s.post(b)
	}
	err := s.postWatched(b)
	if err != nil && !errors.Is(err, errLagging) && errors.Is(err, ErrFull) {
		// API Gateway's shape of a reader that stopped (lagged.go): the frame was not
		// taken, so the cursor stays before it. Past the bound, lagged.
		if lag, lerr := s.d.laggingAt(s.ctx, s.o.AgentID, s.p.Next); lerr == nil && lag {
			return errLagging
		}
	}
	return err
}

// closeLagged drops a connection whose live tail fell more than OutboundQueue events
// behind. The record goes with the connection, and the lease with it.
// A disowned connection (postWatched) has its records closed already: the frame and
// the delete are left.
func (s *sender) closeLagged() error {
	if s.st == stateDisowned {
		if err := s.fire(evClose); err != nil {
			return err
		}
		return s.d.drop(s.ctx, s.o.ConnID, protocol.CodeLagged, message(protocol.CodeLagged))
	}
	if err := s.join(); err != nil {
		return err
	}
	if err := s.fire(evClose); err != nil {
		return err
	}
	return s.d.Close(s.ctx, s.o, protocol.CodeLagged, message(protocol.CodeLagged))
}

// mayLinger reports whether a sender that has sent everything may linger: only a
// fast-path sender (see wake.more) of a subscribed connection with more than lingerFor
// of its budget left.
func (s *sender) mayLinger() bool {
	return s.w.more != nil && s.o.Sub != 0 && (s.stopAt.IsZero() || time.Until(s.stopAt) > lingerFor)
}

// linger is the lingering sender's step: it waits up to lingerFor for the appender's
// next events under the same lease (evMore), or lets the lease go (evQuiet). Every
// lingerLook it looks at the record (look): a Pending mark means another process
// appended or asked, so the log is read.
func (s *sender) linger() error {
	next := s.w.more(lingerFor)
	if len(next) == 0 {
		return s.fire(evQuiet)
	}
	if err := s.fire(evMore); err != nil {
		return err
	}
	s.hints = normalize(next)
	if s.w.budget > 0 {
		s.stopAt = time.Now().Add(s.w.budget)
	}
	if time.Since(s.looked) >= lingerLook {
		if err := s.look(); err != nil {
			return err
		}
		s.looked = time.Now()
	}
	return nil
}

// look is a lingering sender's look at the record: a read (1 read unit), not a cursor
// write, unless the record asks for one. A Pending mark means the log is read rather
// than the hints trusted; a resubscribe is adopted by a cursor write (Store.Checkpoint);
// a lease that is no longer this sender's stops it. The cursor itself waits for the
// release, or for CheckpointEvery/4 events (renew).
func (s *sender) look() error {
	if err := s.poll(); err != nil {
		return err
	}
	cur, err := s.d.store.Owner(s.ctx, s.o.Key())
	switch {
	case errors.Is(err, connections.ErrNotFound):
		return s.lost(fmt.Errorf("%w: %s", connections.ErrLeaseLost, s.o.AgentID))
	case err != nil:
		return err
	case cur.Lease != s.holder || cur.ConnID != s.o.ConnID:
		return s.lost(fmt.Errorf("%w: %s", connections.ErrLeaseLost, s.o.AgentID))
	case cur.Sub != s.o.Sub:
		if err := s.checkpoint(); err != nil {
			return err
		}
	}
	if cur.Pending || s.o.Pending {
		s.hints = nil
	}
	return nil
}

// release is step 4, the releasing sender's step: write the cursor and let the lease
// go (evLetGo). A Pending mark or a resubscribe found there keeps the lease, to look at
// the log again (evLookAgain, evResubscribe); a lease found lost is another sender's
// to serve (evLeaseLost), no error.
func (s *sender) release() error {
	if err := s.join(); err != nil {
		return err
	}
	if s.st == stateResubscribed {
		// The write just joined adopted a resubscribe: its cursor has not been read
		// from yet, and a release now would record it as sent.
		return nil
	}
	cur, ok, err := s.d.store.Release(s.ctx, s.o, s.holder, s.p)
	if errors.Is(err, connections.ErrLeaseLost) {
		return s.fire(evLeaseLost) // superseded or expired: the new owner's sender takes over
	}
	if err != nil {
		return err
	}
	if ok {
		return s.fire(evLetGo)
	}
	s.lg.DebugContext(s.ctx, "looking again", "pending", s.o.Sub == cur.Sub, "next_seq", s.p.Next)
	if err := s.fire(evLookAgain); err != nil {
		return err
	}
	return s.adopt(cur)
}

// handover leaves the progress and asks a fresh invocation to continue.
func (s *sender) handover() error {
	if err := s.join(); err != nil {
		return err
	}
	if err := s.d.store.Abandon(s.ctx, s.o, s.holder, s.p); err != nil {
		return err
	}
	if err := s.fire(evHandOver); err != nil {
		return err
	}
	return s.d.kick(s.ctx, Kick{Kind: KickPump, AgentID: s.o.Key()})
}

// post posts b, a frame of the sender's own, if its state lets it post (evPost): never
// once the lease is no longer its own.
func (s *sender) post(b []byte) error {
	if err := s.fire(evPost); err != nil {
		return err
	}
	return s.d.post(s.ctx, s.o.ConnID, b)
}

// lagging reports whether the live tail is more than OutboundQueue events behind.
func (d *Deliverer) lagging(next int64, batch []sessionlog.Event) bool {
	tip := batch[len(batch)-1].Seq
	if len(batch) > d.cfg.OutboundQueue {
		return true
	}
	return tip-next+1 > int64(d.cfg.OutboundQueue)
}

func (d *Deliverer) nearDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < d.cfg.HandoverMargin
}
