package client_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/terret/terret-ws/client"
)

// TestEventsPaging: Client.Events pages the agent's log over HTTP on the socket's host:
// pages of at most the replay limit, gapless, until next_seq passes last_seq; a bad
// token is the server's unauthorized.
func TestEventsPaging(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	c, err := client.Dial(ctxT(t), s.url(agent), tok, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s.seed(t, agent, 1, sharedReplayLimit+10) // more than one page
	var seqs []int64
	pages := 0
	for from := int64(0); ; pages++ {
		p, err := c.Events(ctxT(t), from)
		if err != nil {
			t.Fatal(err)
		}
		if p.ReplayTruncated != nil && from > 0 {
			t.Fatalf("page from %d truncated: %+v", from, p.ReplayTruncated)
		}
		for _, e := range p.Events {
			var v struct{ Seq int64 }
			if err := json.Unmarshal(e, &v); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, v.Seq)
		}
		if p.NextSeq > p.LastSeq {
			break
		}
		from = p.NextSeq
	}
	// The first page starts at the replay limit's floor (replay_truncated), as a
	// subscribe from 0 would; the pages then run gapless to the tip.
	last := int64(sharedReplayLimit + 10)
	first := last + 1 - sharedReplayLimit
	if len(seqs) == 0 || seqs[0] != first || seqs[len(seqs)-1] != last || int64(len(seqs)) != last-first+1 || pages != 0 {
		t.Fatalf("paged seqs %v in %d extra pages, want %d..%d in one page of the replay limit", seqs, pages, first, last)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("gap or duplicate at %d: %v", i, seqs)
		}
	}
	u, err := client.EventsURL(s.url(agent))
	if err != nil {
		t.Fatal(err)
	}
	// Pages of 25 from the floor: three, gapless, the last ending at the tip.
	next, n := first, 0
	for ; next <= last; n++ {
		p, err := client.ReadEvents(ctxT(t), nil, u, tok, next, 25)
		if err != nil || len(p.Events) == 0 || len(p.Events) > 25 || p.NextSeq != next+int64(len(p.Events)) || p.LastSeq != last {
			t.Fatalf("a page of 25 from %d: %d events, next %d, last %d (%v)", next, len(p.Events), p.NextSeq, p.LastSeq, err)
		}
		next = p.NextSeq
	}
	if n != 3 || next != last+1 {
		t.Fatalf("paged %d pages of 25 to %d, want 3 to %d", n, next, last+1)
	}
	_, err = client.ReadEvents(ctxT(t), nil, u, "tt_nope", 0, 0)
	var pe *client.ProtocolError
	if !errors.As(err, &pe) || pe.Code != client.CodeUnauthorized {
		t.Fatalf("a bad token: %v, want unauthorized", err)
	}
}
