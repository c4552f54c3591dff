package devstack_test

import (
	"context"
	"log/slog"
	"slices"
)

// logHook is a slog.Handler that hands each record's message and attributes (its
// own and the logger's, by key) to on, and keeps nothing: how a test follows what the
// stack logged (a connection accepted, a frame received) instead of waiting for it.
type logHook struct {
	on    func(msg string, vals map[string]slog.Value)
	attrs []slog.Attr
}

func (h logHook) Enabled(context.Context, slog.Level) bool { return true }
func (h logHook) WithAttrs(as []slog.Attr) slog.Handler {
	return logHook{on: h.on, attrs: append(slices.Clip(h.attrs), as...)}
}
func (h logHook) WithGroup(string) slog.Handler { return h }
func (h logHook) Handle(_ context.Context, r slog.Record) error {
	vals := map[string]slog.Value{}
	for _, a := range h.attrs {
		vals[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool { vals[a.Key] = a.Value; return true })
	h.on(r.Message, vals)
	return nil
}
