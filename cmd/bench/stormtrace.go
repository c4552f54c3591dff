package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
)

// stormTrace follows each storm client through the stack, to break its catch-up time
// down: its $connect invocation (from the gateway's Wrap), the posts to its connection
// (from the meter), its deliver kick, and its replay's page reads (the delivery
// Observer's PageRead). It records only while on: the storm turns it on for its own
// clients and off before its floor.
type stormTrace struct {
	on atomic.Bool

	mu       sync.Mutex
	connects map[string]connectSpan // by agent
	posts    map[string]*postSeries // by connection id
	kicks    map[string]time.Time   // by agent: the first asynchronous pump invocation's start
	pages    map[string][]pageSpan  // by agent
}

type connectSpan struct {
	conn       string
	start, end time.Time
}

// postSeries is what the posts to one connection met until the first one was taken
// (hello): how many there were, when the first went and when one was taken.
type postSeries struct {
	first, taken time.Time
	posts, gone  int
}

type pageSpan struct {
	began    time.Time // the read's slot wait began
	slotWait time.Duration
	polls    int
	read     time.Duration
}

func newStormTrace() *stormTrace { return &stormTrace{} }

func (t *stormTrace) start() {
	t.mu.Lock()
	t.connects, t.posts, t.kicks, t.pages = map[string]connectSpan{}, map[string]*postSeries{}, map[string]time.Time{}, map[string][]pageSpan{}
	t.mu.Unlock()
	t.on.Store(true)
}

func (t *stormTrace) stop() { t.on.Store(false) }

// wrap traces the connect and asynchronous deliver invocations (devstack.Measure.Wrap,
// after the invocation counter).
func (t *stormTrace) wrap(name string, h lambda.Handler) lambda.Handler {
	switch name {
	case "connect", "deliver (async)":
		return tracedHandler{t: t, name: name, h: h}
	}
	return h
}

type tracedHandler struct {
	t    *stormTrace
	name string
	h    lambda.Handler
}

func (th tracedHandler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	if !th.t.on.Load() {
		return th.h.Invoke(ctx, payload)
	}
	began := time.Now()
	if th.name == "deliver (async)" {
		var k struct {
			Kind    string `json:"kind"`
			AgentID string `json:"agent_id"`
		}
		if json.Unmarshal(payload, &k) == nil && k.Kind == "pump" {
			th.t.mu.Lock()
			if _, ok := th.t.kicks[k.AgentID]; !ok {
				th.t.kicks[k.AgentID] = began
			}
			th.t.mu.Unlock()
		}
		return th.h.Invoke(ctx, payload)
	}
	out, err := th.h.Invoke(ctx, payload)
	var ev struct {
		Query          map[string]string `json:"queryStringParameters"`
		RequestContext struct {
			ConnectionID string `json:"connectionId"`
		} `json:"requestContext"`
	}
	if json.Unmarshal(payload, &ev) == nil {
		th.t.mu.Lock()
		th.t.connects[ev.Query["agent_id"]] = connectSpan{conn: ev.RequestContext.ConnectionID, start: began, end: time.Now()}
		th.t.mu.Unlock()
	}
	return out, err
}

// post records a PostToConnection to connID that ended at `at` with err (the meter's
// hook).
func (t *stormTrace) post(params any, began time.Time, err error) {
	if !t.on.Load() {
		return
	}
	in, ok := params.(*apigatewaymanagementapi.PostToConnectionInput)
	if !ok {
		return
	}
	id := aws.ToString(in.ConnectionId)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.posts[id]
	if s == nil {
		s = &postSeries{first: began}
		t.posts[id] = s
	}
	if !s.taken.IsZero() {
		return
	}
	s.posts++
	var gone *gwtypes.GoneException
	switch {
	case err == nil:
		s.taken = time.Now()
	case errors.As(err, &gone):
		s.gone++
	}
}

// PageRead is the delivery SlotObserver's hook (through replayGauge).
func (t *stormTrace) PageRead(agentID string, slotWait time.Duration, polls int, read time.Duration) {
	if !t.on.Load() {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.pages[agentID] = append(t.pages[agentID], pageSpan{began: now.Add(-read - slotWait), slotWait: slotWait, polls: polls, read: read})
	t.mu.Unlock()
}

// stormBreakdown is where a storm client's time went, each as the median and the
// largest over the clients (seconds, or a count).
type stormBreakdown struct {
	DialToConnect  span `json:"dial_to_connect_s"`          // first dial → its $connect invocation starts
	Connect        span `json:"connect_s"`                  // the $connect invocation
	ConnectToKick  span `json:"connect_start_to_kick_s"`    // $connect starts → the hello's deliver invocation starts
	KickToFirst    span `json:"kick_to_first_post_s"`       // that invocation starts → its first post of hello
	FirstToHello   span `json:"first_post_to_hello_s"`      // first post → the post that was taken
	ConnectedWait  span `json:"connect_end_to_hello_s"`     // $connect ends → hello taken (retry waits)
	HelloPosts     span `json:"hello_posts"`                // posts until hello was taken
	HelloToClient  span `json:"hello_taken_to_client_s"`    // hello taken → the client has it
	SubToRead      span `json:"subscribe_to_first_read_s"`  // subscribe sent → its first page's slot wait begins
	SlotWait       span `json:"slot_wait_s"`                // summed over the client's pages
	SlotPolls      span `json:"slot_polls"`                 // polls for a slot, summed over its pages
	Read           span `json:"replay_read_s"`              // page reads, summed
	ReadToCaughtUp span `json:"last_read_to_caught_up_s"`   // the last page read → the client has its last event
	Pages          span `json:"replay_pages"`               // page reads per client
	Clients        int  `json:"clients_traced"`             // clients with every span above
	Missing        int  `json:"clients_missing_some_spans"` // clients some span could not be matched for
}

// span is a median and a maximum.
type span struct {
	P50 float64 `json:"p50"`
	Max float64 `json:"max"`
}

func spanOf(xs []float64) span {
	if len(xs) == 0 {
		return span{}
	}
	ds := make([]time.Duration, len(xs))
	for i, x := range xs {
		ds[i] = time.Duration(x * float64(time.Second))
	}
	return span{P50: percentile(ds, 50).Seconds(), Max: percentile(ds, 100).Seconds()}
}

// breakdown matches the trace to the storm's clients (dialled at t0).
func (t *stormTrace) breakdown(t0 time.Time, clients []*stormClient) stormBreakdown {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b stormBreakdown
	cols := map[string][]float64{}
	put := func(k string, v float64) { cols[k] = append(cols[k], v) }
	sec := func(a, z time.Time) float64 { return z.Sub(a).Seconds() }
	for _, c := range clients {
		cs, ok := t.connects[c.agent]
		ps := t.posts[cs.conn]
		kick, kok := t.kicks[c.agent]
		pages := t.pages[c.agent]
		if !ok || ps == nil || ps.taken.IsZero() || !kok || len(pages) == 0 {
			b.Missing++
			continue
		}
		b.Clients++
		put("dial", sec(t0, cs.start))
		put("connect", sec(cs.start, cs.end))
		put("kick", sec(cs.start, kick))
		put("first", sec(kick, ps.first))
		put("retries", sec(ps.first, ps.taken))
		put("wait", sec(cs.end, ps.taken))
		put("posts", float64(ps.posts))
		put("client", sec(ps.taken, c.helloAt))
		put("sub", sec(c.subAt, pages[0].began))
		var wait, read time.Duration
		polls := 0
		last := pages[0].began
		for _, p := range pages {
			wait += p.slotWait
			read += p.read
			polls += p.polls
			last = maxTime(last, p.began.Add(p.slotWait+p.read))
		}
		put("slot", wait.Seconds())
		put("polls", float64(polls))
		put("read", read.Seconds())
		put("tail", sec(last, c.doneAt))
		put("pages", float64(len(pages)))
	}
	b.DialToConnect, b.Connect, b.ConnectToKick = spanOf(cols["dial"]), spanOf(cols["connect"]), spanOf(cols["kick"])
	b.KickToFirst, b.FirstToHello, b.ConnectedWait = spanOf(cols["first"]), spanOf(cols["retries"]), spanOf(cols["wait"])
	b.HelloPosts, b.HelloToClient, b.SubToRead = spanOf(cols["posts"]), spanOf(cols["client"]), spanOf(cols["sub"])
	b.SlotWait, b.SlotPolls, b.Read = spanOf(cols["slot"]), spanOf(cols["polls"]), spanOf(cols["read"])
	b.ReadToCaughtUp, b.Pages = spanOf(cols["tail"]), spanOf(cols["pages"])
	return b
}
