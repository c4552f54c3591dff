package delivery

import (
	"context"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
)

// A reader that stops reading shows in one of two ways, and both feed one rule: the
// live tail more than OutboundQueue events ahead of the sender's cursor, the next event
// the client has not been handed (laggingAt), closes it with lagged.
//
//   - The local gateway answers a post once its frame is written to a socket whose
//     kernel send buffer is small (localgw.Config.SendBuffer), or after its write
//     timeout with the frame still queued: a post to a reader that stopped waits.
//   - API Gateway refuses a post with LimitExceededException when "the WebSocket client
//     side buffer is full" (ErrFull, post.go): the frame is not taken and the cursor
//     stays before it; the sender retries it for about 0.8 s (post), then checks the
//     bound.
//
// Either way a live post goes unanswered while the log's tip moves on, and the bound is
// in events, not time: a sender that peeked only between posts would let the appender
// run as far past the bound as it appends during one post (a write timeout of 2 s let
// 200 events of a fast appender through with a bound of 16). So a live post that is
// still unanswered after watchAfter is watched (postWatched): the sender reads the
// log's tip every watchEvery until the post answers, and closes the connection with
// lagged as soon as a read finds the tip past the bound — the records at once (the
// connection's state, the ownership), the lagged frame and the delete once the post
// under way has answered, so that the frame goes behind it.
//
// The peeks after the first are paced by the appends: each peek sees how many events
// came since the one before, and the next comes once half the room left under the
// bound would be used at that rate (watchPause), every watchEvery at most and
// watchMin at least. A fixed 100 ms let an appender that writes an event every few
// milliseconds (DynamoDB's own latency) put 20 or more events past a bound of 16
// between two peeks; paced, the overshoot stays within about half the bound.
//
// A post on API Gateway takes tens of milliseconds whatever the client does, so the
// watch costs reads (1 read unit each) only for a post that waits or is being retried.
const (
	watchAfter = 100 * time.Millisecond
	watchEvery = 100 * time.Millisecond
	watchMin   = 10 * time.Millisecond
)

// watchPause is the pause before the next peek at the tip of a watch whose last peek
// found tip, n events more than the peek before it, made since that peek; behind is
// how many events tip is past the cursor, queue the bound.
func watchPause(n int64, since time.Duration, behind, queue int64) time.Duration {
	room := queue - behind
	if n <= 0 || room <= 0 {
		return watchEvery
	}
	// At n events per since, half the room is used in since × room/(2n).
	return min(max(time.Duration(float64(since)*float64(room)/float64(2*n)), watchMin), watchEvery)
}

// laggingAt reports whether the live tail of agentID is more than OutboundQueue events
// ahead of next, the sender's cursor: one read of the log's tip.
func (d *Deliverer) laggingAt(ctx context.Context, agentID string, next int64) (bool, error) {
	tip, err := d.log.Tip(ctx, agentID)
	if err != nil {
		return false, err
	}
	return tip-next+1 > int64(d.cfg.OutboundQueue), nil
}

// postWatched posts b, a frame of the live tail starting at the cursor s.p.Next, and
// watches the bound while the post waits (see watchAfter). It returns errLagging once
// the connection is disowned as lagged (evDisown; closeLagged posts the frame and
// deletes it) and the post under way has answered; otherwise the post's own outcome.
func (s *sender) postWatched(b []byte) error {
	if err := s.fire(evPost); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.d.post(s.ctx, s.o.ConnID, b) }()
	t := time.NewTimer(watchAfter)
	defer t.Stop()
	queue := int64(s.d.cfg.OutboundQueue)
	// The last peek: the tip it found and when. Before the first, the tip is taken to
	// be the cursor's last event, so the first peek's rate counts the batch under way
	// too: its next peek comes no later than it should.
	seen, seenAt := s.p.Next-1, time.Now()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
		}
		tip, err := s.d.log.Tip(s.ctx, s.o.AgentID)
		if err != nil {
			t.Reset(watchEvery) // a failed read: the next peek, or the post's answer, decides
			continue
		}
		behind := tip - s.p.Next + 1
		if behind <= queue {
			now := time.Now()
			t.Reset(watchPause(tip-seen, now.Sub(seenAt), behind, queue))
			seen, seenAt = tip, now
			continue
		}
		s.lg.InfoContext(s.ctx, "reader past the outbound-queue bound while a post waits", "next_seq", s.p.Next)
		if err := s.join(); err != nil {
			<-done
			return err
		}
		if err := s.d.disown(s.ctx, s.o, protocol.CodeLagged); err != nil {
			<-done
			return err
		}
		if err := s.fire(evDisown); err != nil {
			<-done
			return err
		}
		<-done // the frame under way goes before lagged
		return errLagging
	}
}
