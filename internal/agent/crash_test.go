package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	hangbound "github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tables"
)

// A crash test stops the runner at a named point (the crash hook abandons the
// invocation's lease and memory as a killed process would), checks what the log
// holds, then sends a stimulus and checks that the resumed turn lost and doubled
// nothing.

func TestCrashBetweenModelCallAndToolResult(t *testing.T) {
	t.Parallel()
	for _, point := range []string{agent.CrashToolCalls, agent.CrashToolRun} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			hook, crashed := crashOnce(point)
			e := newEnv(t, opts{crash: hook})
			e.inject(script(`{"call":[{"tool":"echo","args":{"text":"once"}}]}`, `{"say":"end"}`), true)
			waitChan(t, crashed, "the crash")
			e.settle()
			evs := e.events()
			if count(evs, agent.TypeToolCall) != 1 || count(evs, agent.TypeToolResult) != 0 || count(evs, agent.TypeTurnEnd) != 0 {
				t.Fatalf("after the crash:\n%s", dump(evs))
			}
			e.inject("resume now", true)
			evs = e.waitTurnEnds(1)
			e.settle()
			e.noErrors()
			for typ, n := range map[string]int{agent.TypeTurnStart: 1, agent.TypeUserMessage: 1, agent.TypeToolCall: 1,
				agent.TypeToolResult: 1, agent.TypeContextInjected: 1, agent.TypeTurnEnd: 1} {
				if count(evs, typ) != n {
					t.Errorf("%s %d times, want %d\n%s", typ, count(evs, typ), n, dump(evs))
				}
			}
			res := ofType(evs, agent.TypeToolResult)[0]
			if str(res, "call_id") != str(ofType(evs, agent.TypeToolCall)[0], "id") || string(payload(res)["result"].(map[string]any)["text"].(string)) != "once" {
				t.Errorf("tool/result %s", res.Payload)
			}
			if indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "resume now"}) < indexOf(evs, agent.TypeToolResult, nil) {
				t.Errorf("the wake text rides the step after the owed call")
			}
			if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "end" {
				t.Errorf("resumed turn did not finish\n%s", dump(evs))
			}
		})
	}
}

func TestCrashAroundInboxDrain(t *testing.T) {
	t.Parallel()
	for _, point := range []string{agent.CrashInboxRead, agent.CrashInboxLogged} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			hook, crashed := crashOnce(point)
			e := newEnv(t, opts{crash: hook})
			e.inject(script(`{"call":[{"tool":"sleep","args":{"ms":400}}]}`, `{"say":"end"}`), true)
			e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
			e.inject("steer", false)
			waitChan(t, crashed, "the crash")
			e.settle()
			logged := count(e.events(), agent.TypeContextInjected)
			if want := map[string]int{agent.CrashInboxRead: 0, agent.CrashInboxLogged: 1}[point]; logged != want {
				t.Fatalf("context/injected %d times after the crash, want %d", logged, want)
			}
			e.inject("kick", true)
			evs := e.waitTurnEnds(1)
			e.settle()
			e.noErrors()
			if indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "steer"}) < 0 || count(evs, agent.TypeContextInjected) != 2 ||
				indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "kick"}) < 0 {
				t.Errorf("each inject must land exactly once\n%s", dump(evs))
			}
			if count(evs, agent.TypeTurnStart) != 1 || lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
				t.Errorf("turn\n%s", dump(evs))
			}
		})
	}
}

func TestCrashBetweenUserMessageAndTurnStart(t *testing.T) {
	t.Parallel()
	hook, crashed := crashOnce(agent.CrashUserMessage)
	e := newEnv(t, opts{crash: hook})
	e.inject("first words", true)
	waitChan(t, crashed, "the crash")
	e.settle()
	if got := typesOf(e.events()); len(got) != 2 || got[1] != agent.TypeUserMessage {
		t.Fatalf("after the crash: %v", got)
	}
	e.inject("kick", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if count(evs, agent.TypeUserMessage) != 1 || count(evs, agent.TypeTurnStart) != 1 || count(evs, agent.TypeContextInjected) != 1 {
		t.Errorf("the started turn is finished, its waking text logged once\n%s", dump(evs))
	}
	if str(ofType(evs, agent.TypeUserMessage)[0], "turn_id") != str(ofType(evs, agent.TypeTurnStart)[0], "turn_id") {
		t.Errorf("turn ids differ")
	}
}

func TestCrashAfterTurnEndMetersOnce(t *testing.T) {
	t.Parallel()
	hook, crashed := crashOnce(agent.CrashTurnEnded)
	e := newEnv(t, opts{crash: hook})
	e.inject("one", true)
	waitChan(t, crashed, "the crash")
	e.settle()
	if c, _ := e.svc.Usage(e.ctx, e.agentID); c.Turns != 0 {
		t.Fatalf("metered before the state write: %+v", c)
	}
	e.inject("two", true)
	evs := e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil || c.Turns != 2 {
		t.Errorf("counters %+v %v, want 2 turns metered once each\n%s", c, err, dump(evs))
	}
	if count(evs, agent.TypeTurnStart) != 2 {
		t.Errorf("turns\n%s", dump(evs))
	}
}

// failingLog fails every append of one event type while broken is set.
type failingLog struct {
	agent.Log
	typ    string
	broken atomic.Bool
}

func (f *failingLog) AppendIn(ctx context.Context, agentID string, fence sessionlog.Fence, typ string, payload any, stamp string) (sessionlog.Event, error) {
	if f.broken.Load() && typ == f.typ {
		return sessionlog.Event{}, errors.New("store unavailable")
	}
	return f.Log.AppendIn(ctx, agentID, fence, typ, payload, stamp)
}

func TestFailedResumeLeavesTurnOpen(t *testing.T) {
	t.Parallel()
	var fl *failingLog
	e := newEnv(t, opts{retries: 2, wrapLog: func(l agent.Log) agent.Log {
		fl = &failingLog{Log: l, typ: agent.TypeToolResult}
		fl.broken.Store(true)
		return fl
	}})
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"x"}}]}`, `{"say":"ok"}`), true)
	e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
	e.settle() // the invocation and Lambda's two retries all failed
	if n := len(e.inv.errors()); n != 3 {
		t.Errorf("%d failed invocations, want 3 (Lambda's two retries)", n)
	}
	if evs := e.events(); count(evs, agent.TypeTurnEnd) != 0 || count(evs, agent.TypeToolResult) != 0 {
		t.Fatalf("a failed resume must log no turn/end\n%s", dump(evs))
	}
	fl.broken.Store(false)
	e.inject("try again", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	if count(evs, agent.TypeTurnStart) != 1 || count(evs, agent.TypeToolResult) != 1 || lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
		t.Errorf("the next stimulus resumes the open turn\n%s", dump(evs))
	}
}

func TestDeadlineHandover(t *testing.T) {
	t.Parallel()
	// Each invocation may run 6 s; it hands over with less than half of that left, so
	// the 4 s of tool sleeps take two invocations at least, and a DynamoDB request slowed
	// down by a loaded machine still has 3 s to finish before the deadline. All three
	// grow with the machine's load (hang.Scaled), so a loaded machine gives the same
	// room as an idle one; Lambda's retries (four here) resume an invocation that
	// missed its deadline anyway.
	timeout := hangbound.Scaled(6 * time.Second)
	e := newEnv(t, opts{timeout: timeout, margin: timeout - 100*time.Millisecond, retries: 4})
	step := fmt.Sprintf(`{"call":[{"tool":"sleep","args":{"ms":%d}}]}`, (timeout / 6).Milliseconds())
	e.inject(script(step, step, step, step, `{"say":"made it"}`), true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if n := e.inv.calls.Load(); n < 2 {
		t.Errorf("%d invocations; the runner should have handed over", n)
	}
	want := []string{sessionlog.TypeSessionCreated, agent.TypeUserMessage, agent.TypeTurnStart}
	for range 4 {
		want = append(want, agent.TypeToolCall, agent.TypeToolResult)
	}
	want = append(want, agent.TypeAssistantChunk, agent.TypeAssistantChunk, agent.TypeTurnEnd)
	got := typesOf(evs)
	if len(got) > len(want) && got[len(want)] == agent.TypeSessionTitled {
		got = got[:len(want)]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the handover must leave no seam:\n%s", dump(evs))
	}
	if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
		t.Errorf("turn/end %v", lastTurnEnd(t, evs))
	}
}

// The multi-process kill: a child process (this test binary, re-executed) runs the
// runner; the parent SIGKILLs it while a tool runs, then resumes the turn.

const childEnv = "TERRET_AGENT_TEST_CHILD"

type noInvoke struct{}

func (noInvoke) Invoke(context.Context, *invoke.Input) (*invoke.Output, error) {
	return &invoke.Output{StatusCode: 202}, nil
}

type childSpec struct {
	Endpoint string // the parent test's DynamoDB, one of several under make test
	Tables   tables.Names
	AgentID  string
}

func runChild() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db := dynamolocal.Client(spec.Endpoint)
	r, err := agent.NewRunner(agent.Config{Log: sessionlog.New(db, spec.Tables["LogTable"]), DB: db,
		AgentsTable: spec.Tables["AgentsTable"], Invoker: noInvoke{}, RunnerFunction: runnerFunction, LeaseDuration: testLease,
		DeadlineMargin: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Run(ctx, spec.AgentID); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestRunnerProcessKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	cfg := e.cfg
	cfg.Invoker = noInvoke{} // the waking inject's runner is the child process
	quiet, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := quiet.Inject(e.ctx, e.agentID, script(`{"call":[{"tool":"sleep","args":{"ms":1500}}]}`, `{"say":"survived"}`), true); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(childSpec{Endpoint: dynamotest.Endpoint(t), Tables: e.names, AgentID: e.agentID})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the child's tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
	if owner := leaseOwner(t, e); owner == "" {
		t.Fatalf("the child does not hold the lease while its tool runs\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL: %v\n%s", err, out.String())
	}
	if evs := e.events(); count(evs, agent.TypeToolResult) != 0 {
		t.Fatalf("the child finished the tool before the kill\n%s", dump(evs))
	}
	e.inject("after the kill", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	for typ, n := range map[string]int{agent.TypeTurnStart: 1, agent.TypeUserMessage: 1, agent.TypeToolCall: 1,
		agent.TypeToolResult: 1, agent.TypeContextInjected: 1, agent.TypeTurnEnd: 1} {
		if count(evs, typ) != n {
			t.Errorf("%s %d times, want %d\n%s", typ, count(evs, typ), n, dump(evs))
		}
	}
	if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "survived" {
		t.Errorf("resumed turn\n%s", dump(evs))
	}
}

// leaseOwner reads the agent's lease owner straight from AgentsTable.
func leaseOwner(t *testing.T, e *env) string {
	t.Helper()
	out, err := e.db.GetItem(e.ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(e.names["AgentsTable"]),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + e.agentID}, "sk": &types.AttributeValueMemberS{Value: "state"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := out.Item["owner"].(*types.AttributeValueMemberS)
	if owner == nil {
		return ""
	}
	return owner.Value
}

// The lease write also claims the turn a queued wake starts, and moves a short wake's
// text from the queue onto the turn (turn_wake). A runner killed right after that write
// leaves the turn claimed with nothing logged: a cancel finds the turn (it is not
// not_running) and the next runner starts that turn from the moved text, logged once,
// and ends it cancelled; without a cancel, the next stimulus's runner runs it to the
// end, the stimulus riding it as context/injected.
func TestCrashAfterClaimingLeaseWrite(t *testing.T) {
	t.Parallel()
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancel), func(t *testing.T) {
			t.Parallel()
			var armed atomic.Bool
			hook, crashed := crashOnce(agent.CrashAfterAcquire)
			e := newEnv(t, opts{crash: func(p string) bool { return armed.Load() && hook(p) }})
			e.inject("first", true) // titles the session and starts the quota day: the next lease write claims
			e.waitFor("session/titled", func(evs []sessionlog.Event) bool {
				return count(evs, agent.TypeSessionTitled) == 1
			})
			e.settle()
			armed.Store(true)
			e.inject("claimed words", true)
			waitChan(t, crashed, "the crash")
			e.settle()

			item := stateItem(t, e)
			var wake struct {
				Text string `dynamodbav:"text"`
			}
			if w, ok := item["turn_wake"]; ok {
				if err := attributevalue.Unmarshal(w, &wake); err != nil {
					t.Fatal(err)
				}
			}
			if _, claimed := item["turn_id"]; !claimed || wake.Text != "claimed words" {
				t.Fatalf("after the crash the state item has turn_id %v and turn_wake text %q; want the turn claimed with the wake's text", claimed, wake.Text)
			}
			if n := queued(t, item); n != 0 {
				t.Errorf("the claimed wake is still queued (%d queued)", n)
			}
			if got := count(e.events(), agent.TypeUserMessage); got != 1 {
				t.Fatalf("%d user/message events after the crash, want 1 (the first turn's)", got)
			}

			want := agent.StatusCompleted
			if cancel {
				if err := e.svc.Cancel(e.ctx, e.agentID, "stop it"); err != nil {
					t.Fatalf("cancel of the claimed turn: %v, want nil", err)
				}
				want = agent.StatusCancelled
			} else {
				e.inject("kick", true)
			}
			evs := e.waitTurnEnds(2)
			e.settle()
			e.noErrors()
			if n := count(evs, agent.TypeUserMessage); n != 2 || indexOf(evs, agent.TypeUserMessage, map[string]any{"text": "claimed words"}) < 0 {
				t.Errorf("the claimed wake must start the turn, logged once (%d user/message)\n%s", n, dump(evs))
			}
			if got := lastTurnEnd(t, evs)["status"]; got != want {
				t.Errorf("turn/end status %v, want %s\n%s", got, want, dump(evs))
			}
			if !cancel && (count(evs, agent.TypeContextInjected) != 1 || indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "kick"}) < 0) {
				t.Errorf("the stimulus rides the resumed turn once\n%s", dump(evs))
			}
			item = stateItem(t, e)
			for _, a := range []string{"turn_wake", "turn_id"} {
				if _, ok := item[a]; ok {
					t.Errorf("state item after the turn has %s", a)
				}
			}
			if n := queued(t, item); n != 0 {
				t.Errorf("%d injects still queued after the turn, want 0", n)
			}
		})
	}
}

// lateRenewDB lands a dead runner's last lease renewal — sent just before it died,
// written by DynamoDB after — right after the next invocation's first look at the
// lease (its first acquire attempt, which finds the lease live), and moves the agents'
// clock past every lease from that invocation's second attempt on.
type lateRenewDB struct {
	agent.DB
	t          *testing.T
	table, id  string
	clock      *atomic.Int64 // unix ms of the runtime's clock (Config.Now)
	armed      atomic.Bool
	lateUntil  atomic.Int64
	failedSeen atomic.Int64 // failed acquire attempts since armed
}

func (d *lateRenewDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	var cf *types.ConditionalCheckFailedException
	if !d.armed.Load() || !strings.HasPrefix(aws.ToString(in.ConditionExpression), "(attribute_not_exists(#owner) OR") || !errors.As(err, &cf) {
		return out, err
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + d.id}, "sk": &types.AttributeValueMemberS{Value: "state"}}
	switch d.failedSeen.Add(1) {
	case 1: // the dead runner's renewal lands now
		got, gerr := d.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key, ConsistentRead: aws.Bool(true)})
		if gerr != nil {
			d.t.Errorf("read the state item: %v", gerr)
			return out, err
		}
		if _, uerr := d.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: key,
			UpdateExpression:          aws.String("SET #lease_until = :until"),
			ConditionExpression:       aws.String("#owner = :me"),
			ExpressionAttributeNames:  map[string]string{"#lease_until": "lease_until", "#owner": "owner"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":until": &types.AttributeValueMemberN{Value: fmt.Sprint(d.lateUntil.Load())}, ":me": got.Item["owner"]},
		}); uerr != nil {
			d.t.Errorf("the dead runner's late renewal: %v", uerr)
		}
	default: // time passes: the dead runner's lease expires
		d.clock.Add(2 * testLease.Milliseconds())
	}
	return out, err
}

// TestLateRenewalOfADeadRunner: a renewal a runner sent just before it died can be
// written after the next invocation first found the lease live. It proves nothing
// about the holder — only a renewal sent after that look does — so the next invocation
// waits for the lease to expire and resumes the dead runner's turn, instead of leaving
// the turn to a holder that will never release it.
func TestLateRenewalOfADeadRunner(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	var d *lateRenewDB
	crash := func(p string) bool {
		if p != agent.CrashAfterAcquire || d.armed.Load() {
			return false
		}
		// Half a lease later the runner sends a renewal, and dies.
		clock.Add(testLease.Milliseconds() / 2)
		d.lateUntil.Store(clock.Load() + testLease.Milliseconds())
		d.armed.Store(true)
		return true
	}
	e := newEnv(t, opts{crash: crash, wrapDB: func(db agent.DB) agent.DB {
		d = &lateRenewDB{DB: db, t: t, clock: &clock}
		return d
	}})
	d.table, d.id = e.names["AgentsTable"], e.agentID
	e.restart(func(c *agent.Config) { c.Now = func() time.Time { return time.UnixMilli(clock.Load()) } })
	e.inject("hi", true)
	hangbound.Until(t, "the runner's crash after it took the lease", d.armed.Load)
	e.settle()
	if evs := e.events(); count(evs, agent.TypeTurnEnd) != 0 {
		t.Fatalf("the crashed runner logged a turn/end\n%s", dump(evs))
	}

	e.restart(nil)
	if err := e.runner.Run(e.ctx, e.agentID); err != nil {
		t.Fatalf("run: %v", err)
	}
	evs := e.events()
	if d.failedSeen.Load() < 2 || count(evs, agent.TypeTurnEnd) != 1 || lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
		t.Fatalf("after the dead runner's late renewal (%d acquire attempts found the lease held): want its turn resumed and ended by the next invocation\n%s",
			d.failedSeen.Load(), dump(evs))
	}
	e.noErrors()
}
