package sessionlog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// epochRig is a log table with the tables a reset or delete works on.
type epochRig struct {
	names map[string]string
	ops   *sessiondata.Store
}

func newEpochRig(t *testing.T) epochRig {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	ops := sessiondata.New(db, sessiondata.Tables{Log: names["LogTable"], Connections: names["ConnectionsTable"], Agents: names["AgentsTable"]},
		sessiondata.Options{OwnerWait: time.Millisecond})
	return epochRig{names: names, ops: ops}
}

// log is a Log of its own: a cache of its own, as another process has.
func (r epochRig) log(t *testing.T) *sessionlog.Log {
	t.Helper()
	return sessionlog.New(dynamotest.Client(t), r.names["LogTable"])
}

// startOver resets the session, or deletes it and creates it again as the next
// connect does (with a log of its own), and returns the new log's epoch.
func (r epochRig) startOver(t *testing.T, op, session string) string {
	t.Helper()
	ctx := context.Background()
	switch op {
	case "reset":
		epoch, err := r.ops.Reset(ctx, session)
		if err != nil {
			t.Fatalf("reset %s: %v", session, err)
		}
		return epoch
	case "delete":
		if _, err := r.ops.Delete(ctx, session); err != nil {
			t.Fatalf("delete %s: %v", session, err)
		}
		l := r.log(t)
		mustCreate(t, l, session)
		epoch, err := l.Epoch(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		return epoch
	}
	t.Fatalf("no operation %q", op)
	return ""
}

// checkEpoch reads the whole session and fails unless it is gapless from 0, every
// event is of epoch, and none carries a mark of the old log.
func checkEpoch(t *testing.T, l *sessionlog.Log, session, epoch string) []sessionlog.Event {
	t.Helper()
	evs := readAll(t, l, session)
	if len(evs) == 0 || evs[0].ID != epoch {
		t.Fatalf("%s: seq 0 is not of epoch %s: %+v", session, epoch, evs)
	}
	for _, ev := range evs {
		if ev.Epoch != epoch {
			t.Fatalf("%s: seq %d names epoch %q, the log's is %s", session, ev.Seq, ev.Epoch, epoch)
		}
		if strings.Contains(string(ev.Payload), "stale") {
			t.Fatalf("%s: an append built on the erased log landed in the new one: seq %d %s", session, ev.Seq, ev.Payload)
		}
	}
	return evs
}

// TestStaleTipAfterReset: a writer whose tip was cached from a log that a reset or a
// delete has since erased appends after it. Unfenced, that put landed in the next log:
// at the old tip's next seq (a gap after the new seq 0), or, after a conflict, as an
// event of the old session in the new one. Fenced by the epoch it read, it is refused
// (ErrEpoch), nothing lands, and the writer learns the log is another one; a writer
// that read no epoch (Fence{}) has its stale cache refused by the check of seq 0, and
// appends at the new log's tip.
func TestStaleTipAfterReset(t *testing.T) {
	t.Parallel()
	r := newEpochRig(t)
	ctx := context.Background()
	for _, op := range []string{"reset", "delete"} {
		for _, tc := range []struct {
			name  string
			fence func(old string) sessionlog.Fence
			after int   // events the next log holds past seq 0 when the stale writer appends
			want  error // nil: appended at the new log's tip
		}{
			{"epoch read, no lease, next log shorter", func(old string) sessionlog.Fence { return sessionlog.Fence{Epoch: old} }, 1, sessionlog.ErrEpoch},
			{"epoch read, no lease, next log longer", func(old string) sessionlog.Fence { return sessionlog.Fence{Epoch: old} }, 8, sessionlog.ErrEpoch},
			{"epoch read, lease held, next log longer (a conflict)", func(old string) sessionlog.Fence {
				return sessionlog.Fence{Epoch: old, Until: time.Now().Add(time.Hour)}
			}, 8, sessionlog.ErrEpoch},
			{"epoch read, lease ended", func(old string) sessionlog.Fence {
				return sessionlog.Fence{Epoch: old, Until: time.Now().Add(-time.Millisecond)}
			}, 1, sessionlog.ErrLeaseEnded},
			{"no epoch read, next log shorter", func(string) sessionlog.Fence { return sessionlog.Fence{} }, 1, nil},
			{"no epoch read, next log longer", func(string) sessionlog.Fence { return sessionlog.Fence{} }, 8, nil},
		} {
			t.Run(op+"/"+tc.name, func(t *testing.T) {
				session := dynamotest.UniqueName("ep")
				stale := r.log(t)
				mustCreate(t, stale, session)
				old, err := stale.Epoch(ctx, session)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 5 { // the stale writer's cache: tip 5 of the old log
					if _, err := stale.AppendIn(ctx, session, sessionlog.Fence{Epoch: old}, "note", map[string]int{"i": i}, ""); err != nil {
						t.Fatal(err)
					}
				}
				epoch := r.startOver(t, op, session)
				next := r.log(t)
				for i := range tc.after {
					if _, err := next.AppendIn(ctx, session, sessionlog.Fence{Epoch: epoch}, "next", map[string]int{"i": i}, ""); err != nil {
						t.Fatal(err)
					}
				}
				ev, err := stale.AppendIn(ctx, session, tc.fence(old), "note", map[string]string{"text": "stale"}, "")
				if tc.want != nil {
					if !errors.Is(err, tc.want) {
						t.Fatalf("append on the erased log's tip: %+v, %v; want %v", ev, err, tc.want)
					}
					if evs := checkEpoch(t, next, session, epoch); len(evs) != tc.after+1 {
						t.Fatalf("the next log holds %d events, want %d", len(evs), tc.after+1)
					}
					return
				}
				if err != nil {
					t.Fatalf("append with no epoch read: %v", err)
				}
				if ev.Seq != int64(tc.after+1) || ev.Epoch != epoch {
					t.Fatalf("appended at seq %d of epoch %s, want seq %d of %s", ev.Seq, ev.Epoch, tc.after+1, epoch)
				}
				evs := readAll(t, next, session)
				if len(evs) != tc.after+2 || evs[0].ID != epoch || evs[len(evs)-1].Epoch != epoch {
					t.Fatalf("the next log: %+v", evs)
				}
			})
		}
	}
}

// TestAppendsRaceReset: writers in processes of their own (a Log each) append to a
// session, fenced by the epoch they read, while it is reset (or deleted and created
// again) and the next log's own writers start appending to it. Each stale writer is
// refused (ErrEpoch) from the moment the log is another one, and stops; the next log
// is gapless from 0, every event in it of its epoch, none of the old log's writers'.
// Rounds: SESSIONLOG_EPOCH_ROUNDS (default 6).
func TestAppendsRaceReset(t *testing.T) {
	t.Parallel()
	r := newEpochRig(t)
	rounds := 6
	if v, err := strconv.Atoi(os.Getenv("SESSIONLOG_EPOCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	ctx := context.Background()
	for round := range rounds {
		op := []string{"reset", "delete"}[round%2]
		session := dynamotest.UniqueName("race")
		first := r.log(t)
		mustCreate(t, first, session)
		old, err := first.Epoch(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		const writers, nextWriters, perNext, maxStale = 4, 2, 5, 400
		var wg sync.WaitGroup
		refused := make(chan int, writers)
		errs := make(chan error, writers+nextWriters)
		startOver := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := r.log(t)
				// Either fenced way: the lease's plain put is refused by the tip read
				// after a conflict, the transaction by its check of seq 0. (A leased
				// writer that found no conflict is what the lease's wait keeps out;
				// this test's writers hold none, so they take the transaction.)
				f := sessionlog.Fence{Epoch: old}
				for i := 0; ; i++ {
					if i == maxStale {
						errs <- fmt.Errorf("stale writer %d: %d appends, never refused", w, i)
						return
					}
					if i == 3 {
						select {
						case startOver <- struct{}{}:
						default:
						}
					}
					_, err := l.AppendIn(ctx, session, f, "note", map[string]string{"text": fmt.Sprintf("stale %d/%d", w, i)}, "")
					switch {
					case errors.Is(err, sessionlog.ErrEpoch):
						refused <- w
						return
					case err != nil:
						errs <- fmt.Errorf("stale writer %d: %w", w, err)
						return
					}
					if rand.N(4) == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		<-startOver
		epoch := r.startOver(t, op, session)
		for w := range nextWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := r.log(t)
				for i := range perNext {
					if _, err := l.AppendIn(ctx, session, sessionlog.Fence{Epoch: epoch}, "next", map[string]int{"w": w, "i": i}, ""); err != nil {
						errs <- fmt.Errorf("next writer %d: %w", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d (%s): %v", round, op, err)
		}
		if n := len(refused); n != writers {
			t.Fatalf("round %d (%s): %d of %d stale writers were refused", round, op, n, writers)
		}
		evs := checkEpoch(t, first, session, epoch)
		if want := 1 + nextWriters*perNext; len(evs) != want {
			t.Fatalf("round %d (%s): the next log holds %d events, want %d", round, op, len(evs), want)
		}
		t.Logf("round %d (%s): next log %d events", round, op, len(evs))
	}
}
