package sessionlog

import (
	"context"
)

// Notifying is a Log that hands every event it appends to a listener — delivery's fast
// path — right after the write succeeds. The log that appended is the one that
// notifies, so no appender can forget to: wire it once where the log is built. A
// failed append (a conflict) notifies nothing. Reads and
// Create pass through.
type Notifying struct {
	*Log
	notify func(ctx context.Context, ev Event)
}

// Notify wraps l so that notify is called with each event appended through it. notify
// runs on the appender's goroutine, with the appender's context (delivery's fast path
// finds there the handler invocation the event belongs to), and must not block for long.
func Notify(l *Log, notify func(ctx context.Context, ev Event)) *Notifying {
	return &Notifying{Log: l, notify: notify}
}

// Append is Log.Append, then the notification.
func (n *Notifying) Append(ctx context.Context, agentID, typ string, payload any) (Event, error) {
	return n.notified(ctx)(n.Log.Append(ctx, agentID, typ, payload))
}

// AppendAt is Log.AppendAt, then the notification.
func (n *Notifying) AppendAt(ctx context.Context, agentID string, seq int64, typ string, payload any) (Event, error) {
	return n.notified(ctx)(n.Log.AppendAt(ctx, agentID, seq, typ, payload))
}

// AppendInAtStamped is Log.AppendInAtStamped, then the notification.
func (n *Notifying) AppendInAtStamped(ctx context.Context, agentID string, f Fence, seq int64, typ string, payload any, stamp string) (Event, error) {
	return n.notified(ctx)(n.Log.AppendInAtStamped(ctx, agentID, f, seq, typ, payload, stamp))
}

// AppendStamped is Log.AppendStamped, then the notification.
func (n *Notifying) AppendStamped(ctx context.Context, agentID, typ string, payload any, stamp string) (Event, error) {
	return n.notified(ctx)(n.Log.AppendStamped(ctx, agentID, typ, payload, stamp))
}

// AppendIn is Log.AppendIn, then the notification.
func (n *Notifying) AppendIn(ctx context.Context, agentID string, f Fence, typ string, payload any, stamp string) (Event, error) {
	return n.notified(ctx)(n.Log.AppendIn(ctx, agentID, f, typ, payload, stamp))
}

// AppendInAt is Log.AppendInAt, then the notification.
func (n *Notifying) AppendInAt(ctx context.Context, agentID string, f Fence, seq int64, typ string, payload any) (Event, error) {
	return n.notified(ctx)(n.Log.AppendInAt(ctx, agentID, f, seq, typ, payload))
}

func (n *Notifying) notified(ctx context.Context) func(Event, error) (Event, error) {
	return func(ev Event, err error) (Event, error) {
		if err == nil {
			n.notify(ctx, ev)
		}
		return ev, err
	}
}
