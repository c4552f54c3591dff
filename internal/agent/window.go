package agent

import (
	"context"
	"fmt"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// logWindow is an agent's log from some seq on, as one caller holds it, kept current as
// events are read and appended. The open turn's progress is folded in event by event,
// so a step reads the turn here instead of scanning the log again. The runner holds the
// whole log; a verdict holds it from the recorded turn's first seq.
type logWindow struct {
	log     Log
	agentID string
	evs     []sessionlog.Event
	last    int64           // seq of the newest event held, or the seq before the window
	logged  map[string]bool // inbox ids the window holds as user/message or context/injected
	turn    *turnView       // the open turn; nil when there is none
}

// turnView is the open turn: the seq of its turn/start and its progress so far.
type turnView struct {
	seq int64
	*progress
}

func newWindow(log Log, agentID string, from int64) *logWindow {
	return &logWindow{log: log, agentID: agentID, last: from - 1, logged: map[string]bool{}}
}

// add takes in the event after the newest one held (older ones are skipped).
func (w *logWindow) add(ev sessionlog.Event) {
	if ev.Seq <= w.last {
		return
	}
	w.evs = append(w.evs, ev)
	w.last = ev.Seq
	switch ev.Type {
	case TypeUserMessage:
		if id := decode[userMessage](ev).InboxID; id != "" {
			w.logged[id] = true
		}
	case TypeContextInjected:
		if id := decode[contextInjected](ev).InboxID; id != "" {
			w.logged[id] = true
		}
	case TypeTurnStart:
		w.turn = &turnView{seq: ev.Seq, progress: newProgress(ev)}
		return
	case TypeTurnEnd:
		w.turn = nil
		return
	}
	if w.turn != nil {
		w.turn.add(ev)
	}
}

// refresh reads the events appended since the newest one held.
func (w *logWindow) refresh(ctx context.Context) error {
	evs, err := w.log.Read(ctx, w.agentID, w.last+1, maxRead)
	if err != nil {
		return fmt.Errorf("agent: read log of %s: %w", w.agentID, err)
	}
	for _, ev := range evs {
		w.add(ev)
	}
	return nil
}

// append appends one event and keeps the window current: events others appended before
// it (a policy, a verdict) are read in first.
func (w *logWindow) append(ctx context.Context, typ string, payload any) (sessionlog.Event, error) {
	ev, err := w.log.Append(ctx, w.agentID, typ, payload)
	return w.adopt(ctx, typ, ev, err)
}

// appendStamped is append with a stamp kept on the event (sessionlog.Log.AppendStamped).
func (w *logWindow) appendStamped(ctx context.Context, typ string, payload any, stamp string) (sessionlog.Event, error) {
	ev, err := w.log.AppendStamped(ctx, w.agentID, typ, payload, stamp)
	return w.adopt(ctx, typ, ev, err)
}

// adopt keeps the window current after an append of typ returned ev, err: events
// others appended before it are read in first.
func (w *logWindow) adopt(ctx context.Context, typ string, ev sessionlog.Event, err error) (sessionlog.Event, error) {
	if err != nil {
		return sessionlog.Event{}, fmt.Errorf("agent: append %s to %s: %w", typ, w.agentID, err)
	}
	if ev.Seq > w.last+1 {
		gap, err := w.log.Read(ctx, w.agentID, w.last+1, int(ev.Seq-w.last-1))
		if err != nil {
			return ev, fmt.Errorf("agent: read log of %s: %w", w.agentID, err)
		}
		for _, g := range gap {
			w.add(g)
		}
	}
	w.add(ev)
	return ev, nil
}

// maxRead is "the rest of the log" for Read.
const maxRead = 1 << 30
