package sessionlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The shape of TestMultiProcessWritersGapless: 8 writers — OS processes and goroutines,
// each with its own Log (its own tip cache, as separate Lambda instances have) — append
// to one session in rounds. A round starts only when every writer is ready, so all 8
// append at once, and every round opens with at least 7 conditional puts that lose
// their seq: in the first all 8 caches hold seq 0 and aim at seq 1; in a later one
// each cache holds its writer's last seq, and only the round's last writer's is the
// tip. The time goes into those conflicts (a put and a tip query each, against a
// shared DynamoDB Local), not into starting processes: a few short rounds exercise the
// same concurrency as many events.
const (
	writerProcs      = 3
	writerGoroutines = 5
	writerRounds     = 3
	writerPerRound   = 3
)

// Lines of the writer process protocol on its stdout; anything else it prints is kept
// for the failure message.
const (
	helperReady  = "sessionlog-writer: ready"
	helperReport = "sessionlog-writer: report "
)

type mark struct {
	Writer string `json:"writer"`
	N      int    `json:"n"`
}

// ack is what one successful append returned.
type ack struct {
	Seq int64  `json:"seq"`
	ID  string `json:"id"`
	N   int    `json:"n"`
}

// writerReport is what a writer did: its acks per round and the puts it lost.
type writerReport struct {
	Writer    string  `json:"writer"`
	Rounds    [][]ack `json:"rounds"`
	Conflicts int64   `json:"conflicts"`
}

// putMeter counts, around the real client, the conditional puts that found their seq
// taken.
type putMeter struct {
	sessionlog.API
	conflicts atomic.Int64
}

func (m *putMeter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := m.API.PutItem(ctx, in, opts...)
	if dynamoerr.CondFailed(err) {
		m.conflicts.Add(1)
	}
	return out, err
}

type appender interface {
	Append(ctx context.Context, agentID, typ string, payload any) (sessionlog.Event, error)
	Tip(ctx context.Context, agentID string) (int64, error)
}

// runWriter is one writer, in a goroutine or a process. It reads the tip (as a warm
// instance has it cached), then for each round calls ready, waits for start, and
// appends writerPerRound marks.
func runWriter(ctx context.Context, l appender, meter *putMeter, session, name string, ready func(), start func() error) (writerReport, error) {
	rep := writerReport{Writer: name}
	if _, err := l.Tip(ctx, session); err != nil {
		return rep, fmt.Errorf("writer %s: %w", name, err)
	}
	for r := range writerRounds {
		ready()
		if err := start(); err != nil {
			return rep, fmt.Errorf("writer %s round %d: %w", name, r, err)
		}
		var acks []ack
		for i := range writerPerRound {
			n := r*writerPerRound + i
			ev, err := l.Append(ctx, session, "test/mark", mark{name, n})
			if err != nil {
				return rep, fmt.Errorf("writer %s event %d: %w", name, n, err)
			}
			acks = append(acks, ack{ev.Seq, ev.ID, n})
		}
		rep.Rounds = append(rep.Rounds, acks)
	}
	rep.Conflicts = meter.conflicts.Load()
	return rep, nil
}

// writerEvent is a writer telling the test it is ready for the next round, or done.
type writerEvent struct {
	name   string
	done   bool
	report writerReport
	err    error
}

// TestMultiProcessWritersGapless: 3 OS processes and 5 goroutines append to one session
// at once, in rounds behind a barrier. The log must hold every acknowledged append at
// the seq it returned, every writer's every event exactly once, seq 0..n with no gap or
// duplicate — and a reader tailing the log meanwhile must see it grow exactly so.
func TestMultiProcessWritersGapless(t *testing.T) {
	t.Parallel()
	_, table := newLog(t)
	client := dynamotest.Client(t)
	session := dynamotest.UniqueName("s")
	mustCreate(t, sessionlog.New(client, table), session)
	// Cancelling kills the writer processes' groups: nothing outlives a failed test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const writers = writerProcs + writerGoroutines
	events := make(chan writerEvent, writers*(writerRounds+1))
	var procs []*writerProc
	for p := range writerProcs {
		procs = append(procs, startWriterProc(ctx, t, fmt.Sprintf("p%d", p), table, session, events))
	}
	// The tail reader reads whenever a goroutine writer appends, and once more at the end.
	kick := make(chan struct{}, 1)
	rounds := make([]chan struct{}, writerRounds)
	for r := range rounds {
		rounds[r] = make(chan struct{})
	}
	for g := range writerGoroutines {
		name := fmt.Sprintf("g%d", g)
		meter := &putMeter{API: client}
		l := sessionlog.Notify(sessionlog.New(meter, table), func(context.Context, sessionlog.Event) {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		go func() {
			r := 0
			rep, err := runWriter(ctx, l, meter, session, name,
				func() { events <- writerEvent{name: name} },
				func() error {
					defer func() { r++ }()
					select {
					case <-rounds[r]:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
			events <- writerEvent{name: name, done: true, report: rep, err: err}
		}()
	}
	h := history.New()
	tail := h.Subscribe("tail", 0)
	writersDone := make(chan struct{})
	tailed := make(chan error, 1)
	go func() { tailed <- tailLog(ctx, sessionlog.New(client, table), session, tail, kick, writersDone) }()

	// The barrier: release round r only when all writers are ready for it.
	reports := map[string]writerReport{}
	fail := func(ev writerEvent) {
		t.Helper()
		cancel()
		if ev.err == nil {
			ev.err = fmt.Errorf("writer %s finished before the last round", ev.name)
		}
		t.Fatal(ev.err)
	}
	for r := range writerRounds {
		for ready := 0; ready < writers; {
			ev := <-events
			if ev.done {
				fail(ev)
			}
			ready++
		}
		close(rounds[r])
		for _, p := range procs {
			p.release(t)
		}
	}
	for len(reports) < writers {
		ev := <-events
		if !ev.done || ev.err != nil {
			fail(ev)
		}
		reports[ev.name] = ev.report
	}
	close(writersDone)
	if err := <-tailed; err != nil {
		t.Fatalf("tail reader: %v", err)
	}

	evs := readAll(t, sessionlog.New(client, table), session)
	h.CheckLog(t, evs)
	checkReports(t, evs, reports)
}

// checkReports asserts that the log holds each writer's every event exactly once, at
// the seq its append returned; that no event of a round precedes one of the round
// before (the barrier held); and that every round opened with a conflict for all
// writers but one.
func checkReports(t *testing.T, evs []sessionlog.Event, reports map[string]writerReport) {
	t.Helper()
	seen := map[mark]int{}
	for _, ev := range evs[1:] {
		var m mark
		if err := json.Unmarshal(ev.Payload, &m); err != nil {
			t.Fatalf("seq %d payload %s: %v", ev.Seq, ev.Payload, err)
		}
		seen[m]++
	}
	var problems []string
	total, conflicts := 0, int64(0)
	lastOfRound := make([]int64, writerRounds)
	firstOfRound := make([]int64, writerRounds)
	for r := range firstOfRound {
		firstOfRound[r] = 1 << 62
	}
	for name, rep := range reports {
		conflicts += rep.Conflicts
		if len(rep.Rounds) != writerRounds {
			t.Fatalf("writer %s reported %d rounds, want %d", name, len(rep.Rounds), writerRounds)
		}
		for r, acks := range rep.Rounds {
			for _, a := range acks {
				total++
				held := a.Seq >= 1 && a.Seq < int64(len(evs)) && evs[a.Seq].ID == a.ID
				if c := seen[mark{name, a.N}]; c != 1 || !held {
					problems = append(problems, fmt.Sprintf("writer %s event %d: present %d times in the log, want 1; its append returned seq %d id %s, in the log there: %t", name, a.N, c, a.Seq, a.ID, held))
				}
				lastOfRound[r] = max(lastOfRound[r], a.Seq)
				firstOfRound[r] = min(firstOfRound[r], a.Seq)
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Errorf("%d acknowledged appends are not in the log exactly once, at their seq; the first:\n%s", len(problems), strings.Join(problems[:min(len(problems), 10)], "\n"))
	}
	if got, want := len(evs)-1, len(reports)*writerRounds*writerPerRound; got != want || total != want {
		t.Errorf("log holds %d appended events, writers acknowledged %d; want %d", got, total, want)
	}
	for r := 1; r < writerRounds; r++ {
		if firstOfRound[r] <= lastOfRound[r-1] {
			t.Errorf("round %d's first event is seq %d, before round %d's last (seq %d): the writers did not wait for each other", r, firstOfRound[r], r-1, lastOfRound[r-1])
		}
	}
	if want := int64(writerRounds * (len(reports) - 1)); conflicts < want {
		t.Errorf("writers lost %d conditional puts, want at least %d (all but one per round)", conflicts, want)
	}
	t.Logf("%d writers appended %d events in %d rounds; %d puts lost their seq", len(reports), total, writerRounds, conflicts)
}

// tailLog reads the session as it grows, from sub's next seq, each time kick fires and
// once more after done closes, recording every event in sub.
func tailLog(ctx context.Context, l *sessionlog.Log, session string, sub *history.Sub, kick <-chan struct{}, done <-chan struct{}) error {
	for {
		last := false
		select {
		case <-kick:
		case <-done:
			last = true
		case <-ctx.Done():
			return ctx.Err()
		}
		for {
			evs, err := l.Read(ctx, session, sub.Next(), 100)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				sub.ReceiveID(ev.Seq, ev.ID)
			}
			if err := sub.Err(); err != nil {
				return err
			}
			if len(evs) < 100 {
				break
			}
		}
		if last {
			return nil
		}
	}
}

// writerProc is a writer process: this test binary running TestHelperAppendProcess.
type writerProc struct {
	name  string
	stdin io.WriteCloser
}

// startWriterProc starts a writer process in its own process group, killed with the
// group when ctx is cancelled. It forwards the process's ready lines and its final
// report (or failure) to events.
func startWriterProc(ctx context.Context, t *testing.T, name, table, session string, events chan<- writerEvent) *writerProc {
	t.Helper()
	args := []string{"-test.run=^TestHelperAppendProcess$", "-test.count=1"}
	if d, ok := t.Deadline(); ok { // the process gives up no later than this test
		args = append(args, "-test.timeout="+max(time.Until(d), time.Second).Round(time.Second).String())
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(),
		"SESSIONLOG_HELPER=1",
		dynamotest.EnvEndpoint+"="+dynamotest.Endpoint(t),
		"SESSIONLOG_TABLE="+table, "SESSIONLOG_SESSION="+session, "SESSIONLOG_WRITER="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start writer process %s: %v", name, err)
	}
	go func() {
		var output []string
		var rep writerReport
		reported := false
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == helperReady:
				events <- writerEvent{name: name}
			case strings.HasPrefix(line, helperReport):
				reported = json.Unmarshal([]byte(strings.TrimPrefix(line, helperReport)), &rep) == nil
			default:
				output = append(output, line)
			}
		}
		err := cmd.Wait()
		if err == nil && !reported {
			err = errors.New("exited without a report")
		}
		if err != nil {
			err = fmt.Errorf("writer process %s: %v\nstdout:\n%s\nstderr:\n%s", name, err, strings.Join(output, "\n"), stderr.String())
		}
		events <- writerEvent{name: name, done: true, report: rep, err: err}
	}()
	return &writerProc{name: name, stdin: stdin}
}

// release starts the process's next round.
func (p *writerProc) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Errorf("release writer process %s: %v", p.name, err)
	}
}

// TestHelperAppendProcess is the body of a writer process of
// TestMultiProcessWritersGapless.
func TestHelperAppendProcess(t *testing.T) {
	if os.Getenv("SESSIONLOG_HELPER") != "1" {
		t.Skip("helper process for TestMultiProcessWritersGapless")
	}
	// The parent holds the other end of stdin: each line starts a round, and end of
	// file means the parent is gone (failed, timed out, killed) — exit at once rather
	// than outlive it.
	release := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			release <- struct{}{}
		}
		fmt.Fprintln(os.Stderr, "writer process: stdin closed, the test is gone; exiting")
		os.Exit(3)
	}()
	meter := &putMeter{API: dynamotest.Client(t)}
	l := sessionlog.New(meter, os.Getenv("SESSIONLOG_TABLE"))
	rep, err := runWriter(context.Background(), l, meter, os.Getenv("SESSIONLOG_SESSION"), os.Getenv("SESSIONLOG_WRITER"),
		func() { fmt.Println(helperReady) },
		func() error { <-release; return nil })
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(helperReport + string(b))
}
