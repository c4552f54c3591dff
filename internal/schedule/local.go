package schedule

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Local is terret dev's engine: one timer per armed schedule in this process, set
// from the records. Start arms every record in the table, so a fire that came due
// while terret dev was down fires at once (as one, however many were missed), and one
// due later fires on time. A fire that fails is tried again a second later; the
// record's condition keeps it to once per due time.
type Local struct {
	mu     sync.Mutex
	timers map[string]*time.Timer // by agent id + "\x00" + schedule id
	svc    *Service
	ctx    context.Context
	log    *slog.Logger
	closed bool
	wg     sync.WaitGroup
}

var _ Engine = (*Local)(nil)

// LocalMinEvery is the shortest interval terret dev fires.
const LocalMinEvery = time.Second

// NewLocal returns a Local engine; Start binds it to its Service.
func NewLocal(logger *slog.Logger) *Local {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Local{timers: map[string]*time.Timer{}, log: logger}
}

// Start makes svc fire l's schedules and arms every schedule in svc's table. Fires
// run until ctx ends or Close.
func (l *Local) Start(ctx context.Context, svc *Service) error {
	l.mu.Lock()
	l.svc, l.ctx = svc, ctx
	l.mu.Unlock()
	all, err := svc.All(ctx)
	if err != nil {
		return err
	}
	for _, a := range all {
		if err := l.Arm(ctx, a.AgentID, a.Schedule); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every timer and waits for fires under way.
func (l *Local) Close() {
	l.mu.Lock()
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
	l.at(agentID, s.ID, due, time.Until(due))
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
	var t *time.Timer
	t = time.AfterFunc(max(wait, 0), func() {
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
	out, err := svc.Fire(ctx, agentID, id, due)
	if err != nil {
		if ctx.Err() == nil {
			l.log.WarnContext(ctx, "schedule fire failed; trying again in 1s", "agent_id", agentID, "schedule_id", id, "fire_at", formatTime(due), "error", err)
			l.at(agentID, id, due, time.Second)
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
