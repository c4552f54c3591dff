package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// connect creates a token for agent and connects a client, returning once hello came.
func (b *bench) connect(ctx context.Context, agent string, onFrame func(frame)) (*wsClient, error) {
	token, err := b.st.tokens.Create(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", agent, err)
	}
	cl, err := dialAgent(ctx, b.st.dev.WebSocketURL(), agent, token, onFrame)
	if err != nil {
		return nil, err
	}
	if _, err := cl.until(30*time.Second, func(f frame) bool { return f.Type == "hello" }); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

// subscribed connects a client to a fresh agent and subscribes from 0, returning once
// session/created (seq 0) arrived.
func (b *bench) subscribed(ctx context.Context, agent string) (*wsClient, error) {
	return b.subscribedAs(ctx, agent, subscribe(0))
}

// subscribedAs is subscribed with the subscribe frame given (batched or not).
func (b *bench) subscribedAs(ctx context.Context, agent string, sub map[string]any) (*wsClient, error) {
	cl, err := b.connect(ctx, agent, nil)
	if err != nil {
		return nil, err
	}
	if err := cl.send(ctx, sub); err != nil {
		cl.close()
		return nil, err
	}
	if _, err := cl.expectSeq(30*time.Second, 0); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

// levelCounter counts the stack's warnings and errors (the log file has them).
type levelCounter struct{ warn, err atomic.Int64 }

func (c *levelCounter) wrap(h slog.Handler) slog.Handler { return countingHandler{h, c} }

type countingHandler struct {
	slog.Handler
	c *levelCounter
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		h.c.err.Add(1)
	case r.Level >= slog.LevelWarn:
		h.c.warn.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.c}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.c}
}
