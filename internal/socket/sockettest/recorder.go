// Package sockettest holds what the socket routes' tests share across packages: a
// Controller that records its calls, so a test sees which agent operation each frame
// reached and with which stamp, without an agent runtime; and the handlers' logger.
package sockettest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
)

// Call is one Controller call: what it was asked ("Inject ID text wake", …), the stamp
// of the frame it served and when it ran.
type Call struct {
	What  string
	Stamp protocol.Stamp
	At    time.Time
}

// Recorder is a socket.Controller that sends every call on Calls and answers it with
// the error FailWith set for its method ("Inject", "Cancel", …), nil by default.
type Recorder struct {
	Calls chan Call
	mu    sync.Mutex
	errs  map[string]error
}

// NewRecorder returns a Recorder whose Calls holds up to 100 unread calls.
func NewRecorder() *Recorder {
	return &Recorder{errs: map[string]error{}, Calls: make(chan Call, 100)}
}

// FailWith makes the recorder answer method's calls with err (nil: succeed).
func (r *Recorder) FailWith(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[method] = err
}

func (r *Recorder) record(ctx context.Context, method string, args ...any) error {
	st, _ := protocol.StampFrom(ctx)
	r.Calls <- Call{What: strings.TrimSpace(fmt.Sprintln(append([]any{method}, args...)...)), Stamp: st, At: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[method]
}

func (r *Recorder) InjectFrom(ctx context.Context, id, text string, wake bool, _ string) error {
	return r.record(ctx, "Inject", id, text, wake)
}
func (r *Recorder) Cancel(ctx context.Context, id, reason string) error {
	return r.record(ctx, "Cancel", id, reason)
}
func (r *Recorder) Approve(ctx context.Context, id, callID string) error {
	return r.record(ctx, "Approve", id, callID)
}
func (r *Recorder) Deny(ctx context.Context, id, callID, reason string) error {
	return r.record(ctx, "Deny", id, callID, reason)
}
func (r *Recorder) SetModel(ctx context.Context, id, role, spec string) error {
	return r.record(ctx, "SetModel", id, role, spec)
}
func (r *Recorder) SetPolicy(ctx context.Context, id string, patterns []string) error {
	return r.record(ctx, "SetPolicy", id, patterns)
}

// Logger is the route handlers' logger in tests: it discards their lines unless
// SOCKET_LOG=1, which shows them (JSON, debug level) on stderr.
func Logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("SOCKET_LOG") == "1" {
		w = os.Stderr
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
