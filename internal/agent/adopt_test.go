package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// stateWatch is the agents table's client of the invocation under test. After each
// write of the state item it reads the item back (past the invocation); before the
// invocation's next request, and when the test asks, it checks that the invocation
// holds that item as its state.
type stateWatch struct {
	DB
	t      *testing.T
	rn     *activeRun
	after  *state // the state item right after the last write, not checked yet
	what   string // that write's update expression
	writes int    // writes of the state item so far
}

func (w *stateWatch) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.check()
	out, err := w.DB.UpdateItem(ctx, in, o...)
	if sk, _ := in.Key["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == skState {
		got, gerr := w.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
		if gerr != nil {
			w.t.Fatal(gerr)
		}
		st, derr := decodeState(got.Item)
		if derr != nil {
			w.t.Fatal(derr)
		}
		w.after, w.what = &st, aws.ToString(in.UpdateExpression)
		w.writes++
	}
	return out, err
}

func (w *stateWatch) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	w.check()
	return w.DB.GetItem(ctx, in, o...)
}

func (w *stateWatch) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	w.check()
	return w.DB.PutItem(ctx, in, o...)
}

func (w *stateWatch) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	w.check()
	return w.DB.Query(ctx, in, o...)
}

func (w *stateWatch) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w.check()
	return w.DB.DeleteItem(ctx, in, o...)
}

// check reports a state item written since the last check that the invocation does
// not hold.
func (w *stateWatch) check() {
	w.t.Helper()
	if w.after == nil {
		return
	}
	if !reflect.DeepEqual(w.rn.st, *w.after) {
		w.t.Errorf("after the write %q the run holds\n  %+v\nbut the state item is\n  %+v", w.what, w.rn.st, *w.after)
	}
	w.after = nil
}

// titler is a model provider whose every model answers with a title and some usage.
type titler struct{}

func (titler) Model(string) (model.Model, error) { return titler{}, nil }

func (titler) Stream(context.Context, model.Request, func(model.Delta) error) (model.Response, error) {
	return model.Response{Text: "A title", StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 3, OutputTokens: 4}}, nil
}

// TestAdoptEveryStateWrite: after each write of the state item the runner makes — the
// lease, the quota's roll-over, a claim, a cancel at the claim, the turn recorded
// again, a drain, the turn's metering, the titler's usage, a finish and a release
// whose conditions fail, a claim cleared, the release — the invocation holds the item
// exactly as that write left it (a GetItem right after it), other writers' changes
// included: each write returns the item and the runner adopts it.
func TestAdoptEveryStateWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tbl := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	table := tbl["AgentsTable"]
	agentID := dynamotest.UniqueName("adopt-")
	models := model.NewRegistry()
	if err := models.Register("fake", titler{}); err != nil {
		t.Fatal(err)
	}
	lg := sessionlog.New(db, tbl["LogTable"])
	if _, err := lg.Create(ctx, agentID); err != nil {
		t.Fatal(err)
	}
	w := &stateWatch{DB: db, t: t}
	r, err := NewRunner(Config{Log: lg, DB: w, AgentsTable: table, Invoker: &wakeCounter{wakes: map[string]int{}},
		RunnerFunction: "runner", Models: models, TitlerModel: "fake/titler"})
	if err != nil {
		t.Fatal(err)
	}
	rn := r.newRun(agentID)
	w.rn = rn
	other := &store{db: db, table: table} // the service's writes, and a dead runner's: not the invocation's
	raw := func(expr string, vals map[string]types.AttributeValue) error {
		_, err := other.update(ctx, agentID, &dynamodb.UpdateItemInput{UpdateExpression: aws.String(expr),
			ExpressionAttributeNames: names(attrTurnID), ExpressionAttributeValues: vals})
		return err
	}
	if _, err := other.putInbox(ctx, agentID, inboxItem{ID: "k1-0001", Text: "hello", Wake: true, At: "k1"}); err != nil {
		t.Fatal(err)
	}

	var turnID string
	steps := []struct {
		name string
		run  func() error
	}{
		{"the lease", func() error {
			st, ok, err := rn.acquire(ctx)
			if err != nil || !ok {
				return fmt.Errorf("acquire: %t, %v", ok, err)
			}
			return rn.apply(ctx, st)
		}},
		{"the quota's roll-over", func() error {
			_, err := rn.quotaReason(ctx)
			return err
		}},
		{"a claim, cancelled at its start", func() error {
			if err := other.owe(ctx, agentID, "stop", "k2"); err != nil {
				return err
			}
			it := rn.nextWake()
			if it == nil {
				return errors.New("no wake queued")
			}
			if err := rn.startTurn(ctx, *it); err != nil {
				return err
			}
			if turnID = rn.st.TurnID; turnID == "" || rn.st.CancelTurn != turnID {
				return fmt.Errorf("turn %q, cancel_turn %q: want the claimed turn cancelled", turnID, rn.st.CancelTurn)
			}
			return nil
		}},
		{"the open turn recorded again", func() error {
			if err := raw("REMOVE #turn_id", nil); err != nil {
				return err
			}
			if err := rn.boundary(ctx); err != nil {
				return err
			}
			return rn.reconcile(ctx)
		}},
		{"a drain", func() error {
			if _, err := other.putInbox(ctx, agentID, inboxItem{ID: "k3-0001", Text: "steer", At: "k3"}); err != nil {
				return err
			}
			if err := rn.boundary(ctx); err != nil {
				return err
			}
			return rn.drain(ctx)
		}},
		{"the turn's end metered, and the titler's usage", func() error {
			if _, err := rn.endTurn(ctx, rn.log.turn, StatusCompleted, "", nil); err != nil {
				return err
			}
			if err := rn.reconcile(ctx); err != nil {
				return err
			}
			if rn.st.TurnID != "" || rn.st.QuotaTurns != 1 || rn.st.QuotaTokens != 7 {
				return fmt.Errorf("turn %q, quota turns %d, quota tokens %d: want none, 1, 7", rn.st.TurnID, rn.st.QuotaTurns, rn.st.QuotaTokens)
			}
			return nil
		}},
		{"a finish of a turn already finished", func() error {
			if err := other.bump(ctx, agentID); err != nil {
				return err
			}
			return rn.finishTurn(ctx, turnID, TurnUsage{})
		}},
		{"a claim that logged nothing, cleared", func() error {
			if err := raw("SET #turn_id = :t", map[string]types.AttributeValue{":t": s("turn_dead")}); err != nil {
				return err
			}
			if err := rn.boundary(ctx); err != nil {
				return err
			}
			return rn.reconcile(ctx)
		}},
		{"a release refused by a stimulus", func() error {
			if err := other.bump(ctx, agentID); err != nil {
				return err
			}
			released, _, err := rn.release(ctx, rn.seenPending, nil, nil)
			if err == nil && released {
				return errors.New("released despite a stimulus")
			}
			return err
		}},
		{"the release", func() error {
			if err := rn.apply(ctx, rn.st); err != nil {
				return err
			}
			released, _, err := rn.release(ctx, rn.seenPending, nil, nil)
			if err == nil && !released {
				return errors.New("not released")
			}
			return err
		}},
	}
	for _, step := range steps {
		before := w.writes
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if w.writes == before {
			t.Fatalf("%s: no write of the state item", step.name)
		}
		w.check()
		if t.Failed() {
			t.Fatalf("%s: the invocation's state is not the item its write left", step.name)
		}
	}
}
