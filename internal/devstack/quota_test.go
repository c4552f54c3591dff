package devstack_test

import (
	"context"
	"strings"
	"time"

	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// TestRuntimeQuota: an agent whose profile allows one turn a day runs its first turn;
// the second wake, mid-session with the client subscribed, ends in a turn/start and a
// turn/end rejected naming the quota, and nothing else: the wake stays queued. Once the
// operator raises the quota, the next stimulus (a new wake) runs that wake first.
func TestRuntimeQuota(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	table := e.stack.Tables["AgentsTable"]
	runFlows(t, e, flow{"turns_per_day", func(a *agentConn) {
		put := func(profile string) {
			if err := agent.PutProfile(context.Background(), db, table, a.agent, profile); err != nil {
				a.failf("put profile: %v", err)
			}
		}
		put(`{"quotas":{"turns_per_day":1}}`)
		a.inject("first", true)
		id := a.startTurn("first")
		a.follow(id, answerW("first", 0), endW("completed", ""), titledW("first"))

		a.inject("second", true)
		ts := a.expect("turn/start")
		now := time.Now().UTC()
		y, m, d := now.Date()
		reason := "quota: turns_per_day 1 reached; resets at " + time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
		a.follow(ts.str("turn_id"), endW("rejected", reason))
		a.settled(2) // the refused wake does not run

		put(`{"quotas":{"turns_per_day":2}}`)
		a.inject("third", true)
		id = a.startTurn("second")
		if strings.HasPrefix(id, "turn_quota_") || id == ts.str("turn_id") {
			a.failf("the queued wake ran as turn %s; want a new turn", id)
		}
		// The queued wake starts the turn; the new one joins it as context.
		a.follow(id, injectedW("third"), answerW("third", 0), endW("completed", ""))
		a.settled(3)
	}})
}
