package main

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// meter counts every AWS request made through an aws.Config it is installed in, by
// service, operation and (for DynamoDB) table, and sums the capacity DynamoDB reports.
// It sets ReturnConsumedCapacity=TOTAL on every DynamoDB input that has the field, so
// the handlers under test are measured without a change to their code.
//
// A conditional write that fails is billed by DynamoDB (1 write unit per KB of the item)
// but answers with an error, which carries no ConsumedCapacity; such failures are
// counted and priced at 1 write unit each (every item the bench writes is under 1 KB).
type meter struct {
	mu    sync.Mutex
	ops   map[opKey]*opStat
	calls atomic.Int64 // requests finished, of every service
	// onPost, if set, hears every PostToConnection: its input, when it began, its error.
	onPost func(params any, began time.Time, err error)
}

type opKey struct {
	Service, Op, Table string
}

type opStat struct {
	Calls      int64
	Errors     int64
	CondFailed int64   // ConditionalCheckFailed: 1 write unit each, estimated
	TxCanceled int64   // TransactionCanceled: not priced
	RRU, WRU   float64 // as reported by DynamoDB
	Time       time.Duration
}

func newMeter() *meter { return &meter{ops: map[opKey]*opStat{}} }

// install adds the meter to cfg's middleware stacks; every client built from the
// returned config inherits it.
func (m *meter) install(cfg aws.Config) aws.Config {
	cfg.APIOptions = append(append([]func(*middleware.Stack) error(nil), cfg.APIOptions...), m.register)
	return cfg
}

func (m *meter) register(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("BenchMeter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			svc, op := awsmw.GetServiceID(ctx), awsmw.GetOperationName(ctx)
			table := ""
			if svc == "DynamoDB" {
				in.Parameters, table = withConsumedCapacity(in.Parameters)
			}
			began := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			m.record(svc, op, table, out.Result, err, time.Since(began))
			if m.onPost != nil && op == "PostToConnection" {
				m.onPost(in.Parameters, began, err)
			}
			return out, md, err
		}), middleware.After)
}

// withConsumedCapacity returns a copy of a DynamoDB input with ReturnConsumedCapacity
// set to TOTAL (the caller's struct is left alone), and the input's TableName if any.
func withConsumedCapacity(params any) (any, string) {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return params, ""
	}
	table := ""
	if f := v.Elem().FieldByName("TableName"); f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil() {
		table, _ = f.Elem().Interface().(string)
	}
	f := v.Elem().FieldByName("ReturnConsumedCapacity")
	if !f.IsValid() || f.Type() != reflect.TypeOf(types.ReturnConsumedCapacity("")) || f.String() != "" {
		return params, table
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	cp.Elem().FieldByName("ReturnConsumedCapacity").Set(reflect.ValueOf(types.ReturnConsumedCapacityTotal))
	return cp.Interface(), table
}

// readOps are the DynamoDB operations whose capacity is read capacity.
var readOps = map[string]bool{"GetItem": true, "Query": true, "Scan": true, "BatchGetItem": true, "TransactGetItems": true}

func (m *meter) record(svc, op, table string, result any, err error, took time.Duration) {
	type unit struct {
		table    string
		rru, wru float64
	}
	var units []unit
	add := func(c types.ConsumedCapacity) {
		u := unit{table: aws.ToString(c.TableName)}
		switch {
		case c.ReadCapacityUnits != nil || c.WriteCapacityUnits != nil:
			u.rru, u.wru = aws.ToFloat64(c.ReadCapacityUnits), aws.ToFloat64(c.WriteCapacityUnits)
		case readOps[op]:
			u.rru = aws.ToFloat64(c.CapacityUnits)
		default:
			u.wru = aws.ToFloat64(c.CapacityUnits)
		}
		units = append(units, u)
	}
	if svc == "DynamoDB" && err == nil && result != nil {
		if v := reflect.ValueOf(result); v.Kind() == reflect.Pointer && !v.IsNil() {
			switch c := v.Elem().FieldByName("ConsumedCapacity"); {
			case !c.IsValid():
			case c.Kind() == reflect.Pointer && !c.IsNil():
				add(*c.Interface().(*types.ConsumedCapacity))
			case c.Kind() == reflect.Slice:
				for _, x := range c.Interface().([]types.ConsumedCapacity) {
					add(x)
				}
			}
		}
	}
	if op != "Scan" {
		// Every request but a Scan says the stack is busy (settle). The local schedule
		// engine's sweep scans the agents table twice a second whatever happens (it
		// stands in for EventBridge Scheduler), so counting it would keep settle from
		// ever finding the stack quiet.
		m.calls.Add(1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	stat := func(t string) *opStat {
		k := opKey{svc, op, t}
		s := m.ops[k]
		if s == nil {
			s = &opStat{}
			m.ops[k] = s
		}
		return s
	}
	if len(units) == 0 {
		s := stat(table)
		s.Calls++
		s.Time += took
		if err != nil {
			s.Errors++
			switch {
			case dynamoerr.CondFailed(err):
				s.CondFailed++
				s.WRU++
			case dynamoerr.TxCanceled(err):
				s.TxCanceled++
			}
		}
		return
	}
	for i, u := range units {
		s := stat(u.table)
		if i == 0 {
			s.Calls++ // one request, possibly spanning tables
			s.Time += took
		}
		s.RRU += u.rru
		s.WRU += u.wru
	}
}

// usage is a snapshot of a meter; usage values subtract.
type usage map[opKey]opStat

func (m *meter) snapshot() usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := usage{}
	for k, s := range m.ops {
		u[k] = *s
	}
	return u
}

// since returns u minus an earlier snapshot.
func (u usage) since(before usage) usage {
	out := usage{}
	for k, s := range u {
		b := before[k]
		d := opStat{Calls: s.Calls - b.Calls, Errors: s.Errors - b.Errors, CondFailed: s.CondFailed - b.CondFailed,
			TxCanceled: s.TxCanceled - b.TxCanceled, RRU: s.RRU - b.RRU, WRU: s.WRU - b.WRU, Time: s.Time - b.Time}
		if d != (opStat{}) {
			out[k] = d
		}
	}
	return out
}

// sum adds up the stats matching keep.
func (u usage) sum(keep func(opKey) bool) opStat {
	var t opStat
	for k, s := range u {
		if keep(k) {
			t.Calls += s.Calls
			t.Errors += s.Errors
			t.CondFailed += s.CondFailed
			t.TxCanceled += s.TxCanceled
			t.RRU += s.RRU
			t.WRU += s.WRU
			t.Time += s.Time
		}
	}
	return t
}

func dynamo(k opKey) bool { return k.Service == "DynamoDB" }

func operation(svc, op string) func(opKey) bool {
	return func(k opKey) bool { return k.Service == svc && k.Op == op }
}

// keys returns u's keys in a stable order.
func (u usage) keys() []opKey {
	ks := make([]opKey, 0, len(u))
	for k := range u {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.Op < b.Op
	})
	return ks
}

// invocations counts the invocations of the handlers the stack registers, by function
// and trigger, and how long they ran. An invocation is counted when it starts, and its
// busy time accrues while it runs (a snapshot includes the elapsed time of those still
// running), so that a window between two snapshots holds the invocations started in it
// and the handler time spent in it — a deliver "watch" invocation that sleeps out a
// sender's lease (up to 30 s) spreads its time over the windows it spans.
type invocations struct {
	mu       sync.Mutex
	n        map[string]int64
	busy     map[string]time.Duration // of finished invocations
	running  map[int64]runningInvocation
	nextID   int64
	log      []invocationSpan // every invocation, by start
	inflight atomic.Int64
	total    atomic.Int64
}

type runningInvocation struct {
	name string
	at   time.Time
}

// invocationSpan is one invocation's start and end (zero while it runs).
type invocationSpan struct {
	name       string
	start, end time.Time
}

// busyStartedIn sums, by name, the whole duration of the invocations that started in
// [from, to) — those still running count until now. Unlike a window's Busy, it charges a
// long invocation (a watch) entirely to the window that caused it.
func (iv *invocations) busyStartedIn(from, to time.Time) map[string]time.Duration {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	out := map[string]time.Duration{}
	now := time.Now()
	for _, sp := range iv.log {
		if sp.start.Before(from) || !sp.start.Before(to) {
			continue
		}
		end := sp.end
		if end.IsZero() {
			end = now
		}
		out[sp.name] += end.Sub(sp.start)
	}
	return out
}

func newInvocations() *invocations {
	return &invocations{n: map[string]int64{}, busy: map[string]time.Duration{}, running: map[int64]runningInvocation{}}
}

// counted wraps h so that every invocation is counted under name.
func (iv *invocations) counted(name string, h lambda.Handler) lambda.Handler {
	return countedHandler{iv: iv, name: name, h: h}
}

type countedHandler struct {
	iv   *invocations
	name string
	h    lambda.Handler
}

func (c countedHandler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	began := time.Now()
	c.iv.mu.Lock()
	c.iv.n[c.name]++
	id := c.iv.nextID
	c.iv.nextID++
	c.iv.running[id] = runningInvocation{c.name, began}
	span := len(c.iv.log)
	c.iv.log = append(c.iv.log, invocationSpan{name: c.name, start: began})
	c.iv.mu.Unlock()
	c.iv.inflight.Add(1)
	c.iv.total.Add(1)
	defer func() {
		d := time.Since(began)
		c.iv.mu.Lock()
		c.iv.busy[c.name] += d
		c.iv.log[span].end = began.Add(d)
		delete(c.iv.running, id)
		c.iv.mu.Unlock()
		c.iv.inflight.Add(-1)
	}()
	return c.h.Invoke(ctx, payload)
}

type invocationCounts struct {
	N    map[string]int64
	Busy map[string]time.Duration
}

func (iv *invocations) snapshot() invocationCounts {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	c := invocationCounts{N: map[string]int64{}, Busy: map[string]time.Duration{}}
	for k, v := range iv.n {
		c.N[k] = v
	}
	for k, v := range iv.busy {
		c.Busy[k] = v
	}
	now := time.Now()
	for _, r := range iv.running {
		c.Busy[r.name] += now.Sub(r.at)
	}
	return c
}

func (c invocationCounts) since(before invocationCounts) invocationCounts {
	out := invocationCounts{N: map[string]int64{}, Busy: map[string]time.Duration{}}
	for k, v := range c.N {
		if d := v - before.N[k]; d != 0 {
			out.N[k] = d
		}
	}
	for k, v := range c.Busy {
		if d := v - before.Busy[k]; d != 0 {
			out.Busy[k] = d
		}
	}
	return out
}

func (c invocationCounts) total() int64 {
	var t int64
	for _, v := range c.N {
		t += v
	}
	return t
}
