package schedule

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Local is terret dev's engine: one timer per schedule armed in this process, and a
// sweep of the records every SweepInterval (arming what comes due before the next) that fires whatever is due — schedules set
// by another process (a runner under --lambda-emulator, `terret schedule set`) and,
// at start, fires that came due while terret dev was down (as one, however many were
// missed). A fire that fails is tried again at the next sweep; the record's condition
// keeps each due time to one fire, whichever path delivers it first.
type Local struct {
	mu     sync.Mutex
	timers map[string]Timer // by agent id + "\x00" + schedule id
	svc    *Service
	ctx    context.Context
	log    *slog.Logger
	closed bool
	wg     sync.WaitGroup
	stop   chan struct{}
	// SweepInterval is how often the records are read for due fires (default 500 ms).
	SweepInterval time.Duration
	// Clock is the time the engine reads and waits on (default: the machine's); set
	// before Start.
	Clock Clock
	// Deliver, if set, delivers a fire instead of the Service's Fire in this process:
	// terret dev --lambda-emulator invokes the schedule function's bootstrap, as
	// EventBridge Scheduler invokes the function on AWS.
	Deliver func(ctx context.Context, in FireInput) error
}

var _ Engine = (*Local)(nil)

// Clock is what a Local reads the time from and waits on: the machine's clock
// (SystemClock) unless a test drives its own.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a wait armed by Clock.AfterFunc.
type Timer interface {
	Stop() bool
}

// SystemClock is the machine's clock (package time).
type SystemClock struct{}

func (SystemClock) Now() time.Time                            { return time.Now() }
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// LocalMinEvery is the shortest interval terret dev fires.
const LocalMinEvery = time.Second

// NewLocal returns a Local engine; Start binds it to its Service.
func NewLocal(logger *slog.Logger) *Local {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Local{timers: map[string]Timer{}, log: logger, stop: make(chan struct{}), SweepInterval: 500 * time.Millisecond, Clock: SystemClock{}}
}

// Start makes svc fire l's schedules: it arms every schedule in svc's table (a due
// one fires at once) and sweeps the records until ctx ends or Close.
func (l *Local) Start(ctx context.Context, svc *Service) error {
	l.mu.Lock()
	l.svc, l.ctx = svc, ctx
	l.mu.Unlock()
	if err := l.sweep(ctx, true); err != nil {
		return err
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := make(chan struct{}, 1)
		next := func() Timer {
			return l.Clock.AfterFunc(l.SweepInterval, func() {
				select {
				case tick <- struct{}{}:
				default:
				}
			})
		}
		t := next()
		defer func() { t.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-tick:
				if err := l.sweep(ctx, false); err != nil && ctx.Err() == nil {
					l.log.WarnContext(ctx, "schedule sweep failed", "error", err)
				}
				t = next()
			}
		}
	}()
	return nil
}

// sweep fires every due schedule not armed here; with all, it arms every schedule.
func (l *Local) sweep(ctx context.Context, all bool) error {
	list, err := l.svc.All(ctx)
	if err != nil {
		return err
	}
	now := l.Clock.Now()
	for _, a := range list {
		due, err := ParseTime(a.NextAt)
		if err != nil {
			continue
		}
		l.mu.Lock()
		_, armed := l.timers[a.AgentID+"\x00"+a.ID]
		l.mu.Unlock()
		// Armed now when due before the next sweep, so that it fires on time.
		if all || (!armed && due.Before(now.Add(l.SweepInterval))) {
			l.at(a.AgentID, a.ID, due, due.Sub(now))
		}
	}
	return nil
}

// Close stops every timer and waits for fires under way.
func (l *Local) Close() {
	l.mu.Lock()
	if !l.closed {
		close(l.stop)
	}
	l.closed = true
	for k, t := range l.timers {
		t.Stop()
		delete(l.timers, k)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Arm sets the schedule's timer to its NextAt (now, if that is past).
func (l *Local) Arm(_ context.Context, agentID string, s Schedule) error {
	due, err := ParseTime(s.NextAt)
	if err != nil {
		return err
	}
	l.at(agentID, s.ID, due, due.Sub(l.Clock.Now()))
	return nil
}

func (l *Local) at(agentID, id string, due time.Time, wait time.Duration) {
	k := agentID + "\x00" + id
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if t := l.timers[k]; t != nil {
		t.Stop()
	}
	var t Timer
	t = l.Clock.AfterFunc(max(wait, 0), func() {
		l.mu.Lock()
		current := l.timers[k] == t && !l.closed
		if current {
			delete(l.timers, k)
			l.wg.Add(1)
		}
		l.mu.Unlock()
		if current {
			defer l.wg.Done()
			l.fire(agentID, id, due)
		}
	})
	l.timers[k] = t
}

// Disarm stops the schedule's timer.
func (l *Local) Disarm(_ context.Context, agentID, id string) error {
	k := agentID + "\x00" + id
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.timers[k]; t != nil {
		t.Stop()
		delete(l.timers, k)
	}
	return nil
}

// fire fires one due time and arms the schedule's next one from its record.
func (l *Local) fire(agentID, id string, due time.Time) {
	l.mu.Lock()
	svc, ctx := l.svc, l.ctx
	l.mu.Unlock()
	if svc == nil || ctx.Err() != nil {
		return
	}
	var out Outcome
	var err error
	if l.Deliver != nil {
		out, err = "delivered", l.Deliver(ctx, FireInput{AgentID: agentID, ScheduleID: id, FireAt: formatTime(due)})
	} else {
		out, err = svc.Fire(ctx, agentID, id, due)
	}
	if err != nil {
		if ctx.Err() == nil {
			l.log.WarnContext(ctx, "schedule fire failed; the next sweep tries again", "agent_id", agentID, "schedule_id", id, "fire_at", formatTime(due), "error", err)
		}
		return
	}
	l.log.DebugContext(ctx, "schedule fire", "agent_id", agentID, "schedule_id", id, "outcome", string(out))
	sc, err := svc.Get(ctx, agentID, id)
	if err != nil {
		return // gone (a one-shot, or cancelled)
	}
	_ = l.Arm(ctx, agentID, sc)
}
