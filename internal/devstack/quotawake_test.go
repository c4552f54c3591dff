package devstack_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// TestQuotaDeferredWake: a wake a quota refused runs with no further stimulus, started
// by the quota sweep, once the quota allows — when the operator raises the cap (the
// profile write `terret agent quota` makes), and when the day resets (the runtime's
// clock moved to the next UTC day). The client, subscribed throughout, sees each
// refusal and then the queued wake's turn, and nothing else.
func TestQuotaDeferredWake(t *testing.T) {
	t.Parallel()
	if emulated() {
		t.Skip("moves the runtime's clock: in-process only")
	}
	var shift atomic.Int64 // added to the runtime's clock
	e := startRuntimeStack(t, devstack.Options{
		LambdaEmulator: inProcess,
		QuotaSweep:     100 * time.Millisecond,
		AgentClock:     func() time.Time { return time.Now().Add(time.Duration(shift.Load())) },
	})
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	table := e.stack.Tables["AgentsTable"]
	runFlows(t, e, flow{"deferred wake", func(a *agentConn) {
		put := func(profile string) {
			if err := agent.PutProfile(context.Background(), db, table, a.agent, profile); err != nil {
				a.failf("put profile: %v", err)
			}
		}
		refused := func(text string, cap int) {
			a.inject(text, true)
			ts := a.expect("turn/start")
			y, m, d := time.Now().UTC().Date()
			a.follow(ts.str("turn_id"), endW("rejected", "quota: turns_per_day "+strconv.Itoa(cap)+" reached; resets at "+
				time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)))
		}
		put(`{"quotas":{"turns_per_day":1}}`)
		a.inject("first", true)
		id := a.startTurn("first")
		a.follow(id, answerW("first", 0), endW("completed", ""), titledW("first"))

		// The cap raised: the queued wake runs, with no inject.
		refused("second", 1)
		put(`{"quotas":{"turns_per_day":2}}`)
		id = a.startTurn("second")
		a.follow(id, answerW("second", 0), endW("completed", ""))

		// The day over: the queued wake runs, with no inject.
		refused("third", 2)
		shift.Store(int64(24 * time.Hour))
		id = a.startTurn("third")
		a.follow(id, answerW("third", 0), endW("completed", ""))
		a.matchLog()

	}})
}
