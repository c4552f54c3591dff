package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/terret/terret-ws/internal/localgw"
)

// Stats are one function's counters and timings.
type Stats struct {
	Invocations int
	ColdStarts  []ColdStart     // in order
	Warm        []time.Duration // warm invocations' durations, the newest maxWarm
	Replaced    int             // environments ended by a fault (crash, init failure, timeout, kill)
	Dropped     int             // asynchronous events dropped by the retry policy
	Waits       int             // invocations that waited for a free environment at the limit
	Peak        int             // most environments at once
}

// ColdStart is one environment's first invocation.
type ColdStart struct {
	Environment int
	Init        time.Duration // the emulator's INIT REPORT: bootstrap start to ready
	Total       time.Duration // process start to the first invocation's response
	Err         error         // the first invocation's error, if any
}

const maxWarm = 10000

// startTries is how many times an environment that exits at start is started.
const startTries = 3

// pool is one function's execution environments, a lambda.Handler.
type pool struct {
	fn        Function
	rie       string
	bootstrap string
	env       []string
	clientCtx string // X-Amz-Client-Context of every invocation: carries the run's invoke secret
	max       int
	console   io.Writer
	log       *slog.Logger

	mu       sync.Mutex
	idle     []*environment // most recently used last
	busy     map[*environment]bool
	starting int
	nextID   int
	changed  chan struct{} // closed and replaced whenever an environment frees up
	closed   bool
	failed   map[string]*failedEvent // asynchronous events between retries, by request id
	stats    Stats
}

// failedEvent is an event whose last attempt failed.
type failedEvent struct {
	first    time.Time // its first attempt
	attempts int
}

func newPool(fn Function, o Options, bootstrap string, env []string, clientCtx string, log *slog.Logger) *pool {
	return &pool{
		fn: fn, rie: o.RIE, bootstrap: bootstrap, env: env, clientCtx: clientCtx, max: o.MaxEnvironments,
		console: o.Console, log: log,
		busy: map[*environment]bool{}, changed: make(chan struct{}), failed: map[string]*failedEvent{},
	}
}

// Invoke runs one invocation in a free environment, starting one if none is idle and
// the limit allows, else waiting for one. The request id of ctx's LambdaContext is the
// invocation's; the local gateway retries an asynchronous event under the same id, which
// is how the pool applies the function's retry policy to it.
func (p *pool) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	reqID := ""
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		reqID = lc.AwsRequestID
	}
	if reqID == "" {
		reqID = newRequestID()
	}
	if err := p.admit(reqID); err != nil {
		return nil, err
	}
	attempt := time.Now()
	e, started, err := p.acquire(ctx)
	if err != nil {
		p.recordAttempt(reqID, attempt, err)
		return nil, err
	}
	if !e.invoked {
		go p.announce(e, started)
	}
	res := e.invoke(ctx, reqID, p.clientCtx, payload, p.fn.Timeout)
	elapsed := time.Since(started)
	p.release(e, res.healthy)
	p.record(e, res, elapsed)
	p.recordAttempt(reqID, attempt, res.err)
	return res.out, res.err
}

// admit applies the asynchronous retry policy to a retried event: past
// MaxRetryAttempts retries or MaxEventAge, it is dropped without running.
func (p *pool) admit(reqID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.failed[reqID]
	if !ok {
		return nil
	}
	age := time.Since(f.first)
	var why string
	switch {
	case f.attempts > p.fn.Async.MaxRetryAttempts:
		why = fmt.Sprintf("%d attempts, MaximumRetryAttempts %d", f.attempts, p.fn.Async.MaxRetryAttempts)
	case age > p.fn.Async.MaxEventAge:
		why = fmt.Sprintf("event age %v, MaximumEventAgeInSeconds %d", age.Round(time.Millisecond), int(p.fn.Async.MaxEventAge/time.Second))
	default:
		return nil
	}
	p.stats.Dropped++
	p.log.Error("asynchronous event dropped", "function", p.fn.Name, "request_id", reqID, "reason", why)
	return fmt.Errorf("%w: %s %s: %s: %w", ErrDropped, p.fn.Name, reqID, why,
		&localgw.FunctionError{Type: "EventDropped", Message: "dropped by the function's EventInvokeConfig: " + why})
}

// recordAttempt records the outcome of an attempt for the retry policy. Only failed events
// are kept, and only as long as they could still be retried.
func (p *pool) recordAttempt(reqID string, attempt time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.failed, reqID)
		return
	}
	f, ok := p.failed[reqID]
	if !ok {
		f = &failedEvent{first: attempt}
		p.failed[reqID] = f
	}
	f.attempts++
	for id, g := range p.failed {
		if time.Since(g.first) > p.fn.Async.MaxEventAge+time.Hour {
			delete(p.failed, id)
		}
	}
}

// acquire returns a free environment and when its use began (its process start, for a
// new one).
func (p *pool) acquire(ctx context.Context) (*environment, time.Time, error) {
	waited := false
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, time.Time{}, ErrClosed
		}
		if n := len(p.idle); n > 0 {
			e := p.idle[n-1]
			p.idle = p.idle[:n-1]
			select {
			case <-e.exited: // died while idle
				p.stats.Replaced++
				p.signal()
				p.mu.Unlock()
				continue
			default:
			}
			p.busy[e] = true
			p.mu.Unlock()
			return e, time.Now(), nil
		}
		if len(p.busy)+p.starting < p.max {
			p.starting++
			p.nextID++
			id := p.nextID
			p.mu.Unlock()
			started := time.Now()
			e, err := startEnvironment(ctx, p.rie, p.bootstrap, p.fn.Name, id, p.env, p.log)
			for try := 1; errors.Is(err, ErrEnvironment) && try < startTries; try++ {
				// Another process took a port between our check and the emulator's bind.
				e, err = startEnvironment(ctx, p.rie, p.bootstrap, p.fn.Name, id, p.env, p.log)
			}
			p.mu.Lock()
			p.starting--
			if err == nil && p.closed {
				p.mu.Unlock()
				e.kill()
				return nil, time.Time{}, ErrClosed
			}
			if err == nil {
				p.busy[e] = true
				p.stats.Peak = max(p.stats.Peak, len(p.busy)+len(p.idle))
			}
			p.signal()
			p.mu.Unlock()
			return e, started, err
		}
		if !waited {
			waited = true
			p.stats.Waits++
			p.log.Info("all environments busy; waiting", "function", p.fn.Name, "limit", p.max)
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, time.Time{}, fmt.Errorf("emulator: %s: waiting for an environment: %w", p.fn.Name, ctx.Err())
		}
	}
}

// signal wakes the invocations waiting for an environment; p.mu is held.
func (p *pool) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// release returns e to the idle environments, or ends it.
func (p *pool) release(e *environment, healthy bool) {
	p.mu.Lock()
	delete(p.busy, e)
	keep := healthy && !p.closed
	if keep {
		p.idle = append(p.idle, e)
	} else {
		p.stats.Replaced++
	}
	p.signal()
	p.mu.Unlock()
	if !keep {
		e.kill()
	}
}

func (p *pool) record(e *environment, res outcome, elapsed time.Duration) {
	p.mu.Lock()
	p.stats.Invocations++
	if res.cold {
		p.stats.ColdStarts = append(p.stats.ColdStarts, ColdStart{Environment: e.id, Init: res.initDur, Total: elapsed, Err: res.err})
	} else {
		p.stats.Warm = append(p.stats.Warm, elapsed)
		if len(p.stats.Warm) > maxWarm {
			p.stats.Warm = p.stats.Warm[1:]
		}
	}
	p.mu.Unlock()
	if res.cold {
		p.log.Info("cold start", "function", p.fn.Name, "environment", e.id, "init_ms", ms(res.initDur), "first_invocation_ms", ms(elapsed), "ok", res.err == nil)
	}
}

// announce writes a new environment's cold start line on the console once its init
// phase has ended (a runner's first invocation may last minutes after it).
func (p *pool) announce(e *environment, started time.Time) {
	if p.console == nil {
		return
	}
	<-e.inited
	ready := time.Since(started)
	e.mu.Lock()
	initDur, ok, failure := e.initDur, e.initOK, e.initErr
	e.mu.Unlock()
	p.mu.Lock()
	running := len(p.busy) + len(p.idle)
	p.mu.Unlock()
	status := fmt.Sprintf("ready %s after the process started", ready.Round(100*time.Microsecond))
	if !ok {
		status = "init failed"
		if failure != "" {
			status += ": " + failure
		}
	}
	fmt.Fprintf(p.console, "lambda emulator: cold start %s environment %d (%d of at most %d): init %s, %s\n",
		p.fn.Name, e.id, running, p.max, initDur.Round(100*time.Microsecond), status)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// killBusy kills one environment that is running an invocation.
func (p *pool) killBusy() bool {
	p.mu.Lock()
	var victim *environment
	for e := range p.busy {
		victim = e
		break
	}
	p.mu.Unlock()
	if victim == nil {
		return false
	}
	p.log.Warn("killing an environment mid-invocation", "function", p.fn.Name, "environment", victim.id)
	victim.kill()
	return true
}

func (p *pool) snapshot() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ColdStarts = append([]ColdStart(nil), s.ColdStarts...)
	s.Warm = append([]time.Duration(nil), s.Warm...)
	return s
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	envs := append([]*environment(nil), p.idle...)
	for e := range p.busy {
		envs = append(envs, e)
	}
	p.idle = nil
	p.signal()
	p.mu.Unlock()
	for _, e := range envs {
		e.kill()
	}
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
