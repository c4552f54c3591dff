package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
	"github.com/terret/terret-ws/internal/config"
)

// frameTrack follows what the local gateway did with each connection's frames: the
// receive time it stamped on each ("frame received", debug), the agent each connection
// serves ("connected", in connect order per agent), and how many of the connection's
// $default invocations have returned (Measure.Wrap of "message"). A test waits on it
// for what it needs to know — a frame's receive time, a burst's handlers all returned —
// instead of waiting for a while.
type frameTrack struct {
	mu      sync.Mutex
	changed chan struct{}       // closed and replaced on every change
	conns   map[string][]string // agent → connection ids, in connect order
	epochs  map[string][]int64  // connection id → requestTimeEpoch of frame 1, 2, …
	handled map[string]int      // connection id → $default invocations returned
	// returned is when the $default invocation of an inject frame returned (unix ms), by
	// connection id and the frame's text.
	returned map[[2]string]int64
	// overran counts, by connection id, the $default invocations that returned at or
	// past their deadline (the 29 s Lambda would kill them at, answered internal), and
	// the numbered frames the turnstile served without their predecessor once its wait
	// (socket.OrderWait) had passed: either is a machine too slow for a bound the
	// protocol documents, not a frame handled out of order within it.
	overran map[string]int
	// connectsLate counts the $connect invocations that returned at or past their
	// deadline (the gateway answers the handshake 500).
	connectsLate int
	// errs keeps, by connection id, the first few errors the stack logged for it (a
	// handler's failure that the client saw as an error frame): what a round outside
	// the bounds reports as its cause.
	errs map[string][]string
}

func newFrameTrack() *frameTrack {
	return &frameTrack{changed: make(chan struct{}), conns: map[string][]string{},
		epochs: map[string][]int64{}, handled: map[string]int{}, returned: map[[2]string]int64{},
		overran: map[string]int{}, errs: map[string][]string{}}
}

// update changes the track under its lock and wakes every waiter.
func (l *frameTrack) update(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
	close(l.changed)
	l.changed = make(chan struct{})
}

// await returns once cond, called under the track's lock, holds.
func (l *frameTrack) await(ctx context.Context, what string, cond func() bool) error {
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// conn waits for the id of the agent's n-th connection (from 1).
func (l *frameTrack) conn(ctx context.Context, agent string, n int) (string, error) {
	var id string
	err := l.await(ctx, fmt.Sprintf("connection %d of %s", n, agent), func() bool {
		if cs := l.conns[agent]; len(cs) >= n {
			id = cs[n-1]
			return true
		}
		return false
	})
	return id, err
}

// epoch waits for the receive time of frame i (from 1) of connection id.
func (l *frameTrack) epoch(ctx context.Context, id string, i int64) (int64, error) {
	var at int64
	err := l.await(ctx, fmt.Sprintf("receive time of frame %d of %s", i, id), func() bool {
		if es := l.epochs[id]; int64(len(es)) >= i {
			at = es[i-1]
			return true
		}
		return false
	})
	return at, err
}

// settled waits until n $default invocations of connection id have returned.
func (l *frameTrack) settled(ctx context.Context, id string, n int64) error {
	return l.await(ctx, fmt.Sprintf("%d frames of %s handled", n, id), func() bool {
		return int64(l.handled[id]) >= n
	})
}

// outran waits until the handlers of the n frames sent on connection id have returned,
// then returns how many frames of the connection ran past their deadline or the
// turnstile's wait so far.
func (l *frameTrack) outran(ctx context.Context, id string, n int64) (int, error) {
	if err := l.settled(ctx, id, n); err != nil {
		return 0, err
	}
	return l.overruns(id), nil
}

// lateConnects returns how many $connect invocations outlasted their deadline so far.
func (l *frameTrack) lateConnects() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connectsLate
}

// overruns is outran without the wait.
func (l *frameTrack) overruns(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overran[id]
}

// returnedAt waits for the time the $default invocation of connection id's inject of
// text returned.
func (l *frameTrack) returnedAt(ctx context.Context, id, text string) (int64, error) {
	var at int64
	err := l.await(ctx, fmt.Sprintf("the handler of %q on %s", text, id), func() bool {
		var ok bool
		at, ok = l.returned[[2]string{id, text}]
		return ok
	})
	return at, err
}

// wrap is the stack's Measure.Wrap: it counts the returns of $default per connection.
func (l *frameTrack) wrap(name string, h lambda.Handler) lambda.Handler {
	if name == "connect" {
		return invokeFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
			out, err := h.Invoke(ctx, payload)
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl.Add(-config.RouteMargin)) { // see below
				var ev struct {
					RequestContext struct {
						ConnectionID string `json:"connectionId"`
					} `json:"requestContext"`
				}
				_ = json.Unmarshal(payload, &ev)
				l.update(func() {
					l.connectsLate++
					// It may have logged "connected", but the client's handshake failed:
					// not one of the agent's connections.
					for agent, ids := range l.conns {
						l.conns[agent] = slices.DeleteFunc(ids, func(id string) bool { return id == ev.RequestContext.ConnectionID })
					}
				})
			}
			return out, err
		})
	}
	if name != "message" {
		return h
	}
	return invokeFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		out, err := h.Invoke(ctx, payload)
		now := time.Now()
		at := now.UnixMilli()
		// The route's own context ends config.RouteMargin before Lambda's deadline, so
		// that it answers (internal, when its work did not finish) in time: a handler
		// that returns after that point ran to its deadline.
		dl, ok := ctx.Deadline()
		late := ok && !now.Before(dl.Add(-config.RouteMargin))
		var ev struct {
			RequestContext struct {
				ConnectionID string `json:"connectionId"`
			} `json:"requestContext"`
			Body string `json:"body"`
		}
		_ = json.Unmarshal(payload, &ev)
		var f struct{ Type, Text string }
		_ = json.Unmarshal([]byte(ev.Body), &f)
		l.update(func() {
			l.handled[ev.RequestContext.ConnectionID]++
			if late {
				l.overran[ev.RequestContext.ConnectionID]++
			}
			if f.Type == "inject" {
				l.returned[[2]string{ev.RequestContext.ConnectionID, f.Text}] = at
			}
		})
		return out, err
	})
}

type invokeFunc func(ctx context.Context, payload []byte) ([]byte, error)

func (f invokeFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f(ctx, payload)
}

// handler is the slog.Handler feeding the track; it keeps nothing else.
func (l *frameTrack) handler() slog.Handler { return logHook{on: l.observe} }

// observe takes the connections accepted and the frames' receive times from the log.
func (l *frameTrack) observe(msg string, vals map[string]slog.Value) {
	conn := vals["connection_id"].String()
	switch {
	case msg == "connected" && vals["agent_id"].Kind() == slog.KindString:
		agent := vals["agent_id"].String()
		l.update(func() { l.conns[agent] = append(l.conns[agent], conn) })
	case msg == "frame received":
		at := vals["request_time_epoch"].Int64()
		l.update(func() { l.epochs[conn] = append(l.epochs[conn], at) })
	case strings.HasPrefix(msg, "frame order gap"):
		l.update(func() { l.overran[conn]++ })
	}
	// Only lines that carry an error: "sender done" logs its error even when it is nil.
	if e, ok := vals["error"]; ok && conn != "" && e.String() != "<nil>" {
		l.mu.Lock()
		if len(l.errs[conn]) < 3 {
			l.errs[conn] = append(l.errs[conn], msg+": "+e.String())
		}
		l.mu.Unlock()
	}
}

// logged returns the errors the stack logged for connection id (the first few).
func (l *frameTrack) logged(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs[id])
}

// requestMeter counts the stack's AWS requests by operation (Measure.Clients and
// PollerClients): DynamoDB Local, shared by the whole suite, is what a test of many
// sockets spends.
type requestMeter struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *requestMeter) meter(cfg aws.Config) aws.Config {
	cfg.APIOptions = append(slices.Clip(cfg.APIOptions), func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("CountRequests",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				op := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", in.Parameters), "*"), "Input")
				m.mu.Lock()
				if m.n == nil {
					m.n = map[string]int{}
				}
				m.n[op]++
				m.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
	return cfg
}

// String lists the counts, most first, and their total.
func (m *requestMeter) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := slices.SortedFunc(maps.Keys(m.n), func(a, b string) int { return m.n[b] - m.n[a] })
	total := 0
	var parts []string
	for _, op := range ops {
		total += m.n[op]
		parts = append(parts, fmt.Sprintf("%s %d", op, m.n[op]))
	}
	return fmt.Sprintf("%d requests (%s)", total, strings.Join(parts, ", "))
}
