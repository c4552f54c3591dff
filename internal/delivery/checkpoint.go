package delivery

import (
	"github.com/terret/terret-ws/internal/connections"
)

// checkpointDone is the outcome of a cursor write made in the background.
type checkpointDone struct {
	cur connections.Owner
	err error
}

// checkpointAsync writes p for o's subscription under holder's lease while the sender
// posts its next frame: on AWS a post is a round trip of tens of milliseconds and so is
// the write, and a replay would otherwise pay both per frame. The sender waits for the
// outcome (sender.join) before its next write of any kind and before it adopts what the
// write returned (a resubscribe, the extended lease), so writes stay ordered and at
// most two frames' worth — CheckpointEvery events — is ever unrecorded. The channel is
// buffered: a sender that stops without waiting leaks nothing.
func (s *sender) checkpointAsync() chan checkpointDone {
	ctx, o, p := s.ctx, s.o, s.p
	ch := make(chan checkpointDone, 1)
	go func() {
		cur, err := s.d.store.Checkpoint(ctx, o, s.holder, p, s.d.cfg.Lease)
		ch <- checkpointDone{cur, err}
	}()
	return ch
}
