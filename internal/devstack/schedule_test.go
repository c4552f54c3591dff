package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	hangbound "github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// httpBase is the stack's gateway as an http:// URL.
func httpBase(st *devstack.Stack) string {
	return "http" + strings.TrimPrefix(st.WebSocketURL(), "ws")
}

func postSchedule(t *testing.T, st *devstack.Stack, agent, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", httpBase(st)+"/agents/"+agent+"/schedules", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// waitEvents reads the agent's log until done says it holds what the test waits for,
// within the hang bound.
func waitEvents(t *testing.T, lg *sessionlog.Log, agent, what string, done func([]sessionlog.Event) bool) []sessionlog.Event {
	t.Helper()
	deadline := time.Now().Add(hangbound.Bound())
	for {
		evs, err := lg.Read(context.Background(), agent, 0, 1000)
		if err == nil && done(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; log: %s", hangbound.Bound(), what, eventTypes(evs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func eventTypes(evs []sessionlog.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Type + " ")
	}
	return b.String()
}

func indexOf(evs []sessionlog.Event, typ string) int {
	for i, e := range evs {
		if e.Type == typ {
			return i
		}
	}
	return -1
}

func payload(t *testing.T, ev sessionlog.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestScheduleFiresEndToEnd: a schedule set over HTTP fires through terret dev's engine
// and the schedule function: schedule/set, then schedule/fired, then the wake it
// causes — a user/message carrying the schedule's id and text, and the turn it starts —
// in that order; the schedule, a one-shot, is gone after. Real time.
func TestScheduleFiresEndToEnd(t *testing.T) {
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "s1")
	status, sc := postSchedule(t, e.stack, "s1", tok, `{"text":"wake up","in":"1s","id":"soon"}`)
	if status != http.StatusCreated || sc["id"] != "soon" || sc["next_at"] == nil {
		t.Fatalf("POST schedules: %d %v, want 201 with id and next_at", status, sc)
	}
	evs := waitEvents(t, e.log, "s1", "the fire's turn to end", func(evs []sessionlog.Event) bool { return indexOf(evs, "turn/end") >= 0 })
	set, fired, msg, start, end := indexOf(evs, "schedule/set"), indexOf(evs, "schedule/fired"), indexOf(evs, "user/message"), indexOf(evs, "turn/start"), indexOf(evs, "turn/end")
	if !(0 < set && set < fired && fired+1 == msg && msg < start && start < end) {
		t.Fatalf("order: %s; want schedule/set, schedule/fired, user/message right after it, turn/start, turn/end", eventTypes(evs))
	}
	if p := payload(t, evs[fired]); p["schedule_id"] != "soon" || p["fire_at"] != sc["next_at"] {
		t.Fatalf("schedule/fired %v, want schedule_id soon and fire_at %v", p, sc["next_at"])
	}
	if p := payload(t, evs[msg]); p["schedule_id"] != "soon" || p["text"] != "wake up" {
		t.Fatalf("user/message %v, want the schedule's text and id", p)
	}
	due, _ := time.Parse(time.RFC3339, sc["next_at"].(string))
	at, _ := time.Parse(time.RFC3339, evs[fired].At)
	t.Logf("fired %s after its due time", at.Sub(due))
	if n := strings.Count(eventTypes(evs), "schedule/fired"); n != 1 {
		t.Fatalf("%d schedule/fired, want 1", n)
	}
	req, _ := http.NewRequest("GET", httpBase(e.stack)+"/agents/s1/schedules", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"schedules":[]}` {
		t.Fatalf("GET schedules after the one-shot fired: %d %s", resp.StatusCode, b)
	}
}

// TestScheduleSurvivesRestart: a fire that comes due while terret dev is down fires
// when it starts again, from the same tables; a schedule of an agent whose session was
// reset meanwhile does not.
func TestScheduleSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	endpoint := dynamotest.Endpoint(t)
	prefix := dynamotest.UniqueName("r") + "-"
	start := func() *devstack.Stack {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, hangbound.Bound())
		defer cancel()
		st, err := devstack.Start(sctx, devstack.Options{DynamoDBEndpoint: endpoint, Addr: "127.0.0.1:0", TablePrefix: prefix,
			PollInterval: 100 * time.Millisecond, Logger: service.Logger(testLogOut(), testLogLevel())})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := start()
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	t.Cleanup(func() {
		for _, name := range st.Tables {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	svc := agentservice.Schedules(st.Config, st.AWSConfig, nil, nil, nil)
	sc, err := svc.Set(ctx, "r1", scheduleSpec("later", "3s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	due, _ := time.Parse(time.RFC3339, sc.NextAt)
	time.Sleep(time.Until(due) + 500*time.Millisecond) // the due time passes while nothing runs
	lg := sessionlog.New(db, st.Tables["LogTable"])
	if evs, _ := lg.Read(ctx, "r1", 0, 100); indexOf(evs, "schedule/fired") >= 0 {
		t.Fatalf("fired while terret dev was down: %s", eventTypes(evs))
	}
	st2 := start()
	t.Cleanup(func() { st2.Close() })
	evs := waitEvents(t, lg, "r1", "the missed fire after the restart", func(evs []sessionlog.Event) bool { return indexOf(evs, "user/message") >= 0 })
	if p := payload(t, evs[indexOf(evs, "schedule/fired")]); p["fire_at"] != sc.NextAt {
		t.Fatalf("schedule/fired %v, want fire_at %s", p, sc.NextAt)
	}
}

func scheduleSpec(text, in string) schedule.Spec { return schedule.Spec{Text: text, In: in} }

// TestScheduleTool: a profile that names the schedule tool lets the (scripted) model set
// its own agent's schedule; the schedule then fires into the agent as a wake.
func TestScheduleTool(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "terret.json")
	if err := os.WriteFile(prof, []byte(`{"tools":[{"name":"schedule"},{"name":"echo"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startStack(t, devstack.Options{Profile: prof})
	tok := e.token(t, "m1")
	c := e.dial(t, "m1", tok)
	c.hello("m1")
	script := `{"script":[{"call":[{"tool":"schedule","args":{"action":"set","text":"reminder","in":"1s","id":"rem"}}]},{"say":"set"}]}`
	c.send(map[string]any{"type": "inject", "text": script, "wake": true})
	// The fire comes as a new turn, or as a steer of the turn that set it if that one
	// still runs: either way its wake follows schedule/fired, and a turn/end follows.
	evs := waitEvents(t, e.log, "m1", "the reminder's wake and a turn/end after it", func(evs []sessionlog.Event) bool {
		f := indexOf(evs, "schedule/fired")
		return f >= 0 && strings.Contains(eventTypes(evs[f:]), "turn/end")
	})
	set, fired := indexOf(evs, "schedule/set"), indexOf(evs, "schedule/fired")
	if set < 0 || fired < set || !strings.Contains(string(evs[fired+1].Payload), `"schedule_id":"rem"`) || !strings.Contains(string(evs[fired+1].Payload), `"text":"reminder"`) {
		t.Fatalf("log: %s; want the tool's schedule/set, then schedule/fired and the wake carrying schedule_id rem", eventTypes(evs))
	}
	if p := payload(t, evs[indexOf(evs, "tool/result")]); p["error"] != nil {
		t.Fatalf("the schedule tool's result: %v", p)
	}
}
