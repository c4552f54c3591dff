package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Durable event types of schedules (docs/events.md).
const (
	TypeSet       = "schedule/set"
	TypeFired     = "schedule/fired" // appended by the runner, before the fire's inject
	TypeCancelled = "schedule/cancelled"
	// TypeRefused: a fire the agent refused (a full inbox, a text too long), logged in
	// place of schedule/fired and its inject.
	TypeRefused = "schedule/refused"
)

// DefaultMaxSchedules is how many schedules an agent may have when its profile sets no
// quotas.schedules.
const DefaultMaxSchedules = 20

// AgentsTable layout: an agent's schedule is an item of pk "agent#<agent id>", sk
// "timer#<schedule id>"; "timers" holds their count (attribute n). Both sort after the
// runtime's range of inbox items and the state item ("inbox#" … "state").
const (
	agentPrefix = "agent#"
	recPrefix   = "timer#"
	skCount     = "timers"
)

// DB is the part of the DynamoDB client schedules use on the agents table.
type DB interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Log appends schedule events to an agent's log (sessionlog.Log).
type Log interface {
	// AppendIn with sessionlog.Fence{}: the put is checked against the log's seq 0 in
	// one transaction (4 write units), so a tip cached from a log since reset or
	// deleted is never appended on.
	AppendIn(ctx context.Context, agentID string, f sessionlog.Fence, typ string, payload any, stamp string) (sessionlog.Event, error)
	Create(ctx context.Context, agentID string) (bool, error)
}

// appendEvent appends to the agent's log, starting the log (session/created) if the
// agent has none yet: a schedule may be set before any client connected.
func (s *Service) appendEvent(ctx context.Context, agentID, typ string, payload any) error {
	_, err := s.cfg.Log.AppendIn(ctx, agentID, sessionlog.Fence{}, typ, payload, "")
	if errors.Is(err, sessionlog.ErrNotFound) {
		if _, err = s.cfg.Log.Create(ctx, agentID); err == nil {
			_, err = s.cfg.Log.AppendIn(ctx, agentID, sessionlog.Fence{}, typ, payload, "")
		}
	}
	return err
}

// Engine delivers fires: it calls Service.Fire for a schedule at (or after) each due
// time, at least once. Local is terret dev's; EventBridge is AWS's.
type Engine interface {
	// Arm makes the engine deliver s's fires (replacing any earlier arming of s).
	Arm(ctx context.Context, agentID string, s Schedule) error
	// Disarm stops s's fires; disarming what is not armed is no error.
	Disarm(ctx context.Context, agentID, id string) error
}

// Fire is one fire's inject, as the agent runtime queues it: the schedule's text with
// wake, carrying ScheduleID and FireAt, written in one transaction with Claim — the
// schedule's own write whose condition makes the fire happen once per due time.
type Fire struct {
	ScheduleID, FireAt, Text string
	Claim                    []types.TransactWriteItem
}

// Injector queues a fire's inject (agent.Service.InjectFire). It returns an error
// wrapping ErrDuplicate when a Claim condition failed (nothing written), and
// ErrRefused when the agent refused the inject (nothing written).
type Injector interface {
	InjectFire(ctx context.Context, agentID string, f Fire) error
}

// Config configures a Service.
type Config struct {
	DB    DB
	Table string // the agents table
	Log   Log
	// Engine arms and disarms; nil: records only (the engine is armed elsewhere).
	Engine Engine
	// Injector queues fires; needed by Fire only.
	Injector Injector
	// Bounds: MinEvery is the engine's shortest interval.
	Bounds Bounds
	// DefaultProfile is the deployment's default profile (JSON), read for
	// quotas.schedules; an agent's own profile on its state item wins.
	DefaultProfile string
	Now            func() time.Time
	Logger         *slog.Logger
}

// Service sets, lists, cancels and fires schedules. Safe for concurrent use.
type Service struct {
	cfg Config
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}
}

// Bounds are the service's bounds (for a tool's or a command's help).
func (s *Service) Bounds() Bounds { return s.cfg.Bounds }

func key(agentID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(agentPrefix + agentID), "sk": str(sk)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }

// setEvent is schedule/set's payload.
type setEvent struct {
	ScheduleID string `json:"schedule_id"`
	Text       string `json:"text"`
	NextAt     string `json:"next_at"`
	At         string `json:"at,omitempty"`
	In         string `json:"in,omitempty"`
	Every      string `json:"every,omitempty"`
	Cron       string `json:"cron,omitempty"`
	TZ         string `json:"tz,omitempty"`
}

// Set stores the schedule sp makes (replacing the agent's schedule of the same id),
// logs schedule/set and arms the engine. A bad spec is an ErrBadSpec naming the field;
// a new schedule past the agent's quota is ErrQuota. Cost: a transaction of the
// record's put and the count's update (2 × 2 write units; a replacement: 1 put), the
// profile's read (0.5 read unit), the append (1 write unit per KB).
func (s *Service) Set(ctx context.Context, agentID string, sp Spec) (Schedule, error) {
	sc, err := Build(sp, s.cfg.Bounds, s.cfg.Now())
	if err != nil {
		return Schedule{}, err
	}
	if v, ok := s.cfg.Engine.(interface{ Validate(Schedule) error }); ok {
		if err := v.Validate(sc); err != nil {
			return Schedule{}, err
		}
	}
	max, err := s.maxSchedules(ctx, agentID)
	if err != nil {
		return Schedule{}, err
	}
	item, err := attributevalue.MarshalMap(sc)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: encode %s: %w", sc.ID, err)
	}
	for k, v := range key(agentID, recPrefix+sc.ID) {
		item[k] = v
	}
	_, err = s.cfg.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.cfg.Table), Item: item, ConditionExpression: aws.String("attribute_not_exists(sk)")}},
		{Update: &types.Update{
			TableName: aws.String(s.cfg.Table), Key: key(agentID, skCount),
			UpdateExpression:          aws.String("ADD #n :one"),
			ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n < :max"),
			ExpressionAttributeNames:  map[string]string{"#n": "n"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":max": num(max)},
		}},
	}})
	switch {
	case dynamoerr.TxCondFailed(err, 0): // the id exists: replace it, the count unchanged
		if _, err := s.cfg.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.cfg.Table), Item: item,
			ConditionExpression: aws.String("attribute_exists(sk)")}); err != nil {
			return Schedule{}, fmt.Errorf("schedule: replace %s of %s: %w", sc.ID, agentID, err)
		}
	case dynamoerr.TxCondFailed(err, 1):
		return Schedule{}, fmt.Errorf("%w: the agent has %d schedules, the most its profile allows (quotas.schedules)", ErrQuota, max)
	case err != nil:
		return Schedule{}, fmt.Errorf("schedule: put %s of %s: %w", sc.ID, agentID, err)
	}
	if err := s.appendEvent(ctx, agentID, TypeSet, setEvent{ScheduleID: sc.ID, Text: sc.Text, NextAt: sc.NextAt,
		At: sp.At, In: sc.In, Every: sc.Every, Cron: sc.Cron, TZ: sp.TZ}); err != nil {
		return Schedule{}, fmt.Errorf("schedule: log set %s of %s: %w", sc.ID, agentID, err)
	}
	if s.cfg.Engine != nil {
		if err := s.cfg.Engine.Arm(ctx, agentID, sc); err != nil {
			return Schedule{}, fmt.Errorf("schedule: arm %s of %s: %w", sc.ID, agentID, err)
		}
	}
	s.cfg.Logger.InfoContext(ctx, "schedule set", "agent_id", agentID, "schedule_id", sc.ID, "next_at", sc.NextAt)
	return sc, nil
}

// List returns the agent's schedules by id. Cost: one Query (0.5 read unit per 4 KB).
func (s *Service) List(ctx context.Context, agentID string) ([]Schedule, error) {
	var out []Schedule
	var start map[string]types.AttributeValue
	for {
		page, err := s.cfg.DB.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.cfg.Table),
			KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(agentPrefix + agentID), ":p": str(recPrefix)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("schedule: list %s: %w", agentID, err)
		}
		for _, it := range page.Items {
			var sc Schedule
			if err := attributevalue.UnmarshalMap(it, &sc); err != nil {
				return nil, fmt.Errorf("schedule: decode a schedule of %s: %w", agentID, err)
			}
			out = append(out, sc)
		}
		if start = page.LastEvaluatedKey; start == nil {
			break
		}
	}
	if out == nil {
		out = []Schedule{}
	}
	return out, nil
}

// Get returns one schedule of the agent, or ErrNotFound.
func (s *Service) Get(ctx context.Context, agentID, id string) (Schedule, error) {
	out, err := s.cfg.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.cfg.Table), Key: key(agentID, recPrefix+id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule: get %s of %s: %w", id, agentID, err)
	}
	if out.Item == nil {
		return Schedule{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	var sc Schedule
	if err := attributevalue.UnmarshalMap(out.Item, &sc); err != nil {
		return Schedule{}, fmt.Errorf("schedule: decode %s of %s: %w", id, agentID, err)
	}
	return sc, nil
}

// Cancel deletes the schedule, logs schedule/cancelled and disarms the engine; an id
// the agent has no schedule of is ErrNotFound. Cost: a transaction of the delete and
// the count's update (2 × 2 write units), the append.
func (s *Service) Cancel(ctx context.Context, agentID, id string) error {
	_, err := s.cfg.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: s.removal(agentID, id, "attribute_exists(sk)", nil)})
	if dynamoerr.TxCondFailed(err, 0) {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("schedule: cancel %s of %s: %w", id, agentID, err)
	}
	if err := s.appendEvent(ctx, agentID, TypeCancelled, map[string]string{"schedule_id": id}); err != nil {
		return fmt.Errorf("schedule: log cancel %s of %s: %w", id, agentID, err)
	}
	if s.cfg.Engine != nil {
		if err := s.cfg.Engine.Disarm(ctx, agentID, id); err != nil {
			return fmt.Errorf("schedule: disarm %s of %s: %w", id, agentID, err)
		}
	}
	s.cfg.Logger.InfoContext(ctx, "schedule cancelled", "agent_id", agentID, "schedule_id", id)
	return nil
}

// removal is a schedule's delete under cond, with its count's decrement.
func (s *Service) removal(agentID, id, cond string, values map[string]types.AttributeValue) []types.TransactWriteItem {
	return []types.TransactWriteItem{
		{Delete: &types.Delete{TableName: aws.String(s.cfg.Table), Key: key(agentID, recPrefix+id),
			ConditionExpression: aws.String(cond), ExpressionAttributeValues: values}},
		{Update: &types.Update{TableName: aws.String(s.cfg.Table), Key: key(agentID, skCount),
			UpdateExpression:          aws.String("ADD #n :minus"),
			ExpressionAttributeNames:  map[string]string{"#n": "n"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":minus": num(-1)}}},
	}
}

// Outcome is what a Fire did.
type Outcome string

// Outcomes of Fire.
const (
	Fired     Outcome = "fired"     // the inject is queued; the runner logs schedule/fired and it
	Duplicate Outcome = "duplicate" // already fired for this due time, or the schedule is gone: nothing logged
	Refused   Outcome = "refused"   // the agent refused the inject: schedule/refused logged
)

// Fire fires the agent's schedule id for its due time due: once per (id, due),
// however many times the engine delivers it and from however many processes at once.
// The schedule's write (the claim: its next due time, or its delete for a one-shot)
// and the inject are one transaction whose condition is that no fire at or after due
// was logged. Fires missed meanwhile come as this one: the next due time is counted
// from the later of due and now. A fire the agent refuses is logged as
// schedule/refused. Cost: 1 read unit for the record, a transaction of 3 items for a
// repeating schedule (6 write units for a short text; a one-shot's delete and count
// make it 4 items, 8 units), and one asynchronous invoke of the runner.
func (s *Service) Fire(ctx context.Context, agentID, id string, due time.Time) (Outcome, error) {
	sc, err := s.Get(ctx, agentID, id)
	if errors.Is(err, ErrNotFound) {
		// Gone (cancelled, or the session reset or deleted): make sure the engine
		// stops delivering it.
		if s.cfg.Engine != nil {
			if err := s.cfg.Engine.Disarm(ctx, agentID, id); err != nil {
				return "", err
			}
		}
		return Duplicate, nil
	}
	if err != nil {
		return "", err
	}
	dueAt := formatTime(due)
	if sc.LastFireAt >= dueAt {
		return Duplicate, nil
	}
	now := s.cfg.Now()
	from := now
	if due.After(from) {
		from = due
	}
	next, more := sc.Next(from)
	values := map[string]types.AttributeValue{":due": str(dueAt)}
	cond := "attribute_exists(sk) AND (attribute_not_exists(last_fire_at) OR last_fire_at < :due)"
	var claim []types.TransactWriteItem
	if more {
		values[":next"] = str(formatTime(next))
		claim = []types.TransactWriteItem{{Update: &types.Update{TableName: aws.String(s.cfg.Table), Key: key(agentID, recPrefix+id),
			UpdateExpression: aws.String("SET last_fire_at = :due, next_at = :next"), ConditionExpression: aws.String(cond),
			ExpressionAttributeValues: values}}}
	} else {
		claim = s.removal(agentID, id, cond, values)
	}
	err = s.cfg.Injector.InjectFire(ctx, agentID, Fire{ScheduleID: id, FireAt: dueAt, Text: sc.Text, Claim: claim})
	switch {
	case err == nil:
		s.cfg.Logger.InfoContext(ctx, "schedule fired", "agent_id", agentID, "schedule_id", id, "fire_at", dueAt)
		return Fired, nil
	case errors.Is(err, ErrDuplicate):
		return Duplicate, nil
	case errors.Is(err, ErrRefused):
		return s.refuse(ctx, agentID, id, dueAt, claim, err)
	default:
		return "", fmt.Errorf("schedule: fire %s of %s at %s: %w", id, agentID, dueAt, err)
	}
}

// refuse claims the fire without its inject and logs schedule/refused with why.
func (s *Service) refuse(ctx context.Context, agentID, id, dueAt string, claim []types.TransactWriteItem, why error) (Outcome, error) {
	_, err := s.cfg.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: claim})
	if dynamoerr.TxCondFailed(err, 0) {
		return Duplicate, nil
	}
	if err != nil {
		return "", fmt.Errorf("schedule: claim refused fire %s of %s: %w", id, agentID, err)
	}
	reason := why.Error()
	if err := s.appendEvent(ctx, agentID, TypeRefused, map[string]string{"schedule_id": id, "fire_at": dueAt, "reason": reason}); err != nil {
		return "", fmt.Errorf("schedule: log refused fire %s of %s: %w", id, agentID, err)
	}
	s.cfg.Logger.WarnContext(ctx, "schedule fire refused", "agent_id", agentID, "schedule_id", id, "fire_at", dueAt, "reason", reason)
	return Refused, nil
}

// Armed is one schedule of some agent, as All finds it.
type Armed struct {
	AgentID string
	Schedule
}

// All returns every agent's schedules, by next due time: what a local engine arms at
// start. It scans the table (terret dev's, on DynamoDB Local); nothing on AWS calls it.
func (s *Service) All(ctx context.Context) ([]Armed, error) {
	var out []Armed
	var start map[string]types.AttributeValue
	for {
		page, err := s.cfg.DB.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(s.cfg.Table),
			FilterExpression:          aws.String("begins_with(sk, :p)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(recPrefix)},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("schedule: scan schedules: %w", err)
		}
		for _, it := range page.Items {
			var a Armed
			if err := attributevalue.UnmarshalMap(it, &a.Schedule); err != nil {
				return nil, fmt.Errorf("schedule: decode a schedule: %w", err)
			}
			pk, _ := it["pk"].(*types.AttributeValueMemberS)
			if pk == nil || len(pk.Value) <= len(agentPrefix) {
				continue
			}
			a.AgentID = pk.Value[len(agentPrefix):]
			out = append(out, a)
		}
		if start = page.LastEvaluatedKey; start == nil {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NextAt < out[j].NextAt })
	return out, nil
}

// maxSchedules is the agent's quotas.schedules: its own profile's (on its state item),
// else the default profile's, else DefaultMaxSchedules.
func (s *Service) maxSchedules(ctx context.Context, agentID string) (int, error) {
	out, err := s.cfg.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.cfg.Table), Key: key(agentID, "state"),
		ProjectionExpression: aws.String("#p"), ExpressionAttributeNames: map[string]string{"#p": "profile"}})
	if err != nil {
		return 0, fmt.Errorf("schedule: read profile of %s: %w", agentID, err)
	}
	if p, ok := out.Item["profile"].(*types.AttributeValueMemberS); ok {
		if n := quotaOf(p.Value); n > 0 {
			return n, nil
		}
	}
	if n := quotaOf(s.cfg.DefaultProfile); n > 0 {
		return n, nil
	}
	return DefaultMaxSchedules, nil
}

func quotaOf(profile string) int {
	var p struct {
		Quotas struct {
			Schedules int `json:"schedules"`
		} `json:"quotas"`
	}
	if profile == "" || json.Unmarshal([]byte(profile), &p) != nil {
		return 0
	}
	return p.Quotas.Schedules
}
