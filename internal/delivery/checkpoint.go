package delivery

import (
	"github.com/terret/terret-ws/internal/connections"
)

// checkpointDone is the outcome of a cursor write made in the background.
type checkpointDone struct {
	p   connections.Progress // what was written
	cur connections.Owner
	err error
}

// checkpointAsync writes p for o's subscription under holder's lease while the sender
// goes on posting: on AWS a post is a round trip of tens of milliseconds and so is the
// write, and on DynamoDB Local the write is the slower by far; a replay would
// otherwise pay both. At most one write is under way (sender.renew); the sender takes
// its outcome (sender.poll, sender.join) before it begins another write of any kind,
// so writes stay ordered, and a post that would take it past CheckpointEvery events
// beyond the stored cursor waits for it. The channel is buffered: a sender that stops
// without waiting leaks nothing.
func (s *sender) checkpointAsync() chan checkpointDone {
	ctx, o, p := s.ctx, s.o, s.p
	ch := make(chan checkpointDone, 1)
	go func() {
		cur, err := s.d.store.Checkpoint(ctx, o, s.holder, p, s.d.cfg.Lease)
		ch <- checkpointDone{p, cur, err}
	}()
	return ch
}
