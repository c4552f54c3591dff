package delivery_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// releaseWrite and clearWrite pick connections.Store's writes out of the requests a
// client sends: a Release, and the clearing of a mark without letting go (an Acquire
// removes a mark too, and is told apart by its SET #lease).
const (
	releaseWrite = "REMOVE #lease, #lease_kind, #lease_until, #pending"
	clearWrite   = "#lease_until = :until REMOVE #pending"
)

// errKilled is what a killed holder's writes answer: they never reach DynamoDB.
var errKilled = errors.New("test: the holder's process was killed")

// releases watches the releases sent through a DynamoDB client (addTo). onRelease, if
// set, runs before a Release is sent, with the holder and its progress; an error it
// returns is the request's answer instead, and kills the holder: none of its later
// writes reaches DynamoDB either.
type releases struct {
	mu        sync.Mutex
	onRelease func(holder string, next int64) error
	dead      map[string]bool
	clears    map[string]int // mark clearings sent, by holder
	refused   map[string]int // releases refused by their condition, by holder
	released  map[string]int // releases that let go, by holder
}

func (r *releases) addTo(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("WatchReleases",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			u, ok := in.Parameters.(*dynamodb.UpdateItemInput)
			if !ok {
				return next.HandleInitialize(ctx, in)
			}
			expr := aws.ToString(u.UpdateExpression)
			me, _ := u.ExpressionAttributeValues[":me"].(*types.AttributeValueMemberS)
			r.mu.Lock()
			if me != nil && r.dead[me.Value] {
				r.mu.Unlock()
				return middleware.InitializeOutput{}, middleware.Metadata{}, errKilled
			}
			hook := r.onRelease
			release := strings.Contains(expr, releaseWrite)
			if me != nil && strings.HasSuffix(expr, clearWrite) && !strings.HasPrefix(expr, "SET #lease ") {
				r.count(&r.clears, me.Value)
			}
			r.mu.Unlock()
			if !release || me == nil {
				return next.HandleInitialize(ctx, in)
			}
			if hook != nil {
				n, _ := u.ExpressionAttributeValues[":next"].(*types.AttributeValueMemberN)
				var next int64
				if n != nil {
					next, _ = strconv.ParseInt(n.Value, 10, 64)
				}
				if err := hook(me.Value, next); err != nil {
					r.mu.Lock()
					if r.dead == nil {
						r.dead = map[string]bool{}
					}
					r.dead[me.Value] = true
					r.mu.Unlock()
					return middleware.InitializeOutput{}, middleware.Metadata{}, err
				}
			}
			out, md, err := next.HandleInitialize(ctx, in)
			r.mu.Lock()
			switch {
			case dynamoerr.CondFailed(err):
				r.count(&r.refused, me.Value)
			case err == nil:
				r.count(&r.released, me.Value)
			}
			r.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// count adds one to holder's entry of *m; r.mu is held.
func (r *releases) count(m *map[string]int, holder string) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[holder]++
}

func (r *releases) set(f func(holder string, next int64) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onRelease = f
}

// of returns holder's release writes: clearings, refused releases and releases that let go.
func (r *releases) of(holder string) (clears, refused, released int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clears[holder], r.refused[holder], r.released[holder]
}

func watchedClient(t *testing.T, r *releases) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(dynamolocal.Config(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(dynamotest.Endpoint(t))
		o.APIOptions = append(o.APIOptions, r.addTo)
	})
}

// TestMarkAheadOfCursor: a holder about to let go finds a mark whose seq it has not
// sent — an event another process appended, whose wake-up found the lease held. It
// must not let go: it keeps the lease and the mark (no clearing write), reads the log,
// sends the event, and then lets go, the mark cleared with the release.
func TestMarkAheadOfCursor(t *testing.T) {
	t.Parallel()
	rel := &releases{}
	r := startRig(t, rigConfig{db: watchedClient(t, rel)})
	const agent = "ahead"
	ctx := context.Background()
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 0, patience); err != nil {
		t.Fatal(err)
	}
	r.appendN(t, r.log, agent, 2, "first")
	if err := c.follow(s, 2, patience); err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	r.kicks.settled(t) // a late handed-over pump would mark without a seq

	// The next release — the fast path's, once it has sent seq 3 — first meets an
	// event (seq 4) appended without a fast path, and the mark its wake-up leaves.
	var once sync.Once
	var marked int64 = -1
	var holder string
	rel.set(func(h string, next int64) error {
		once.Do(func() {
			ev, err := r.log.Append(ctx, agent, "test/event", map[string]any{"tag": "other process"})
			if err != nil {
				t.Errorf("append: %v", err)
				return
			}
			if done, err := r.conns.MarkPending(ctx, agent, ev.Seq); !done || err != nil {
				t.Errorf("mark up to %d = %v, %v", ev.Seq, done, err)
				return
			}
			marked, holder = ev.Seq, h
			if next > ev.Seq {
				t.Errorf("the holder releases at %d, already past the mark %d: nothing tested", next, ev.Seq)
			}
		})
		return nil
	})
	r.appendN(t, r.log, agent, 1, "second")
	if err := c.follow(s, 4, patience); err != nil {
		t.Fatalf("the marked event never came: %v", err)
	}
	r.fast.FlushAll()
	r.kicks.settled(t) // a sender slowed past its budget hands over
	r.settle(t, c, s, agent, 4)
	r.kicks.settled(t) // a sender of the marker slowed past its budget has handed over, and let go
	h.CheckLog(t, readAll(t, r.log, agent))
	if marked != 4 {
		t.Fatalf("marked %d; want the event at seq 4", marked)
	}
	o, err := r.conns.Owner(ctx, agent)
	if err != nil || o.Lease != "" || o.Pending || o.Next != 6 {
		t.Errorf("record after = lease %q, pending %v, next %d (%v); want let go, no mark, next 6 (past settle's marker)", o.Lease, o.Pending, o.Next, err)
	}
	// The holder that met the mark: refused once, no clearing; it let go after sending
	// the event, unless it handed over first (a loaded machine).
	if clears, refused, released := rel.of(holder); refused != 1 || clears != 0 || released > 1 {
		t.Errorf("the holder that met the mark: %d refused releases, %d clearings, %d releases; want 1 refused, no clearing, at most 1 letting go", refused, clears, released)
	}
}

// TestMarksRaceRelease: marks race releases with real goroutines over DynamoDB Local.
// An appender writes one session in bursts — half its events handed to the fast path,
// as the runner does, half not, as by a process that died right after its append —
// while two stream consumers pump batches of those events, split, reordered and
// redelivered as DynamoDB Streams may, leaving marks with whoever holds the lease. One
// holder is killed as it releases: its release, and every later write of its, never
// reaches DynamoDB, and its lease runs out with the marks left on it. The client must
// receive every event, in order, without a gap, each burst before the next is
// appended; a seq may come twice only where the killed holder had sent it without
// recording it.
func TestMarksRaceRelease(t *testing.T) {
	t.Parallel()
	rel := &releases{}
	served := make(chan string, 1)
	r := startRig(t, rigConfig{db: watchedClient(t, rel), served: served})
	const agent, events = "racing", 24
	ctx := context.Background()
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 0, patience); err != nil {
		t.Fatal(err)
	}
	// The subscribe's own sender is done before a release can be killed: the holder
	// killed is one of the appender's or the stream's, never the frame handler's.
	select {
	case <-served:
	case <-time.After(patience):
		t.Fatal("the subscribe's handler did not return")
	}

	began := time.Now()
	var mu sync.Mutex
	killedAt := int64(-1) // the progress the killed holder had not recorded
	armed := make(chan struct{})
	go func() {
		<-armed
		rel.set(func(holder string, next int64) error {
			mu.Lock()
			defer mu.Unlock()
			if killedAt >= 0 {
				return nil
			}
			killedAt = next
			// Its lease runs out: moved into the past here rather than waited for
			// (30 s), so that no live sender's lease ever does.
			_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(r.names["ConnectionsTable"]),
				Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + agent}},
				UpdateExpression:          aws.String("SET lease_until = :past"),
				ConditionExpression:       aws.String("lease = :x"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":past": &types.AttributeValueMemberN{Value: "1"}, ":x": &types.AttributeValueMemberS{Value: holder}},
			})
			if err != nil {
				t.Errorf("expire the killed holder's lease: %v", err)
			}
			return errKilled
		})
	}()

	// The appender works in rounds of a burst each, and the client must receive a
	// round's events before the next begins: an event left behind a released lease is
	// not rescued by a later one's wake-up (whose sender would read the log from the
	// cursor). Half the events go to the fast path, as the runner's do; the other half do
	// not, as those of a process that died right after its append.
	stream := make(chan sessionlog.Event, events)
	var consumers sync.WaitGroup
	var again []int64 // seqs received twice: the client drops them
	receive := func(tip int64) {
		t.Helper()
		for !s.Reached(tip) {
			f, err := c.next(patience)
			if err != nil {
				t.Fatalf("waiting for seq %d of %d: %v", s.Next(), tip, err)
			}
			if f.Seq == nil {
				t.Fatalf("protocol frame %s while expecting seq %d", f.raw, s.Next())
			}
			if *f.Seq < s.Next() {
				again = append(again, *f.Seq)
				continue
			}
			s.ReceiveID(*f.Seq, f.ID)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var seenMu sync.Mutex
	var seen, late []sessionlog.Event
	for range 2 {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for ev := range stream {
				batch := []sessionlog.Event{ev}
			more:
				for len(batch) < 4 {
					select {
					case e, ok := <-stream:
						if !ok {
							break more
						}
						batch = append(batch, e)
					default:
						break more
					}
				}
				seenMu.Lock()
				if len(seen) > 0 && rand.IntN(4) == 0 {
					batch = append(batch, seen[rand.IntN(len(seen))]) // redelivered
				}
				seen = append(seen, batch...)
				if rand.IntN(4) == 0 {
					late = append(late, batch[0]) // redelivered after all the rounds
				}
				seenMu.Unlock()
				rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				if err := r.d.PumpFor(ctx, agent, batch, time.Second); err != nil && !errors.Is(err, errKilled) {
					t.Errorf("pump: %v", err)
				}
			}
		}()
	}
	const burst = 4
	for round := range events / burst {
		if round == events/burst/4 {
			close(armed) // the next release is killed
		}
		var last int64
		for i := range burst {
			ev, err := r.log.Append(ctx, agent, "test/event", map[string]any{"round": round, "i": i})
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			if rand.IntN(2) == 0 {
				r.fast.OnAppend(ctx, ev)
			}
			stream <- ev
			last = ev.Seq
		}
		receive(last)
	}
	close(stream)
	consumers.Wait()
	for _, ev := range late {
		if err := r.d.PumpFor(ctx, agent, []sessionlog.Event{ev}, time.Second); err != nil && !errors.Is(err, errKilled) {
			t.Errorf("late pump: %v", err)
		}
	}
	logged := readAll(t, r.log, agent)
	receive(logged[len(logged)-1].Seq)
	t.Logf("%v: received", time.Since(began))
	r.fast.FlushAll()
	r.kicks.settled(t)
	t.Logf("%v: settled", time.Since(began))
	for {
		f, err := c.next(300 * time.Millisecond)
		if errors.Is(err, errNoFrame) {
			break
		}
		if err != nil || f.Seq == nil || *f.Seq >= s.Next() {
			t.Fatalf("frame %s (%v) where none was due", f.raw, err)
		}
		again = append(again, *f.Seq)
	}
	h.CheckLog(t, logged)
	mu.Lock()
	defer mu.Unlock()
	if killedAt < 0 {
		t.Fatal("no holder was killed: the run did not test a kill")
	}
	for _, seq := range again {
		if seq >= killedAt {
			t.Errorf("seq %d came twice, though the killed holder had recorded only up to %d", seq, killedAt)
		}
	}
	t.Logf("killed a holder releasing at %d; %d seqs sent again after it", killedAt, len(again))
}
