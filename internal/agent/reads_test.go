package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// readLog counts the runner's reads of the inbox (the Query of an agent's items from
// "inbox#" to "state"; not the fold items') and of the log (Read).
type readLog struct {
	agent.DB
	log agent.Log

	mu            sync.Mutex
	inbox, events int
}

func (r *readLog) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if hi, _ := in.ExpressionAttributeValues[":hi"].(*types.AttributeValueMemberS); hi != nil && hi.Value == "state" {
		r.mu.Lock()
		r.inbox++
		r.mu.Unlock()
	}
	return r.DB.Query(ctx, in, o...)
}

type countedLog struct {
	agent.Log
	r *readLog
}

func (l countedLog) Read(ctx context.Context, agentID string, from int64, limit int) ([]sessionlog.Event, error) {
	l.r.mu.Lock()
	l.r.events++
	l.r.mu.Unlock()
	return l.Log.Read(ctx, agentID, from, limit)
}

func (r *readLog) take() (inbox, events int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inbox, events = r.inbox, r.events
	r.inbox, r.events = 0, 0
	return inbox, events
}

// TestFirstPassReadsOnce: a turn of an idle, titled agent reads its inbox once and its
// log once — before the lease write, which claims the turn — and the runner's first
// pass takes those reads instead of making them again (the agent is as they found it).
func TestFirstPassReadsOnce(t *testing.T) {
	t.Parallel()
	r := &readLog{}
	e := newEnv(t, opts{
		wrapDB:  func(db agent.DB) agent.DB { r.DB = db; return r },
		wrapLog: func(l agent.Log) agent.Log { return countedLog{Log: l, r: r} },
	})
	e.inject("first", true) // titles the session
	e.waitFor("session/titled", func(evs []sessionlog.Event) bool {
		return count(evs, agent.TypeSessionTitled) == 1
	})
	e.settle()
	r.take()

	e.inject("second", true)
	e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	inbox, events := r.take()
	t.Logf("inbox %d events %d", inbox, events)
	if inbox != 1 || events != 1 {
		t.Errorf("a turn read the inbox %d times and the log %d times, want once each", inbox, events)
	}
}
