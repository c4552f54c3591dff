package schedule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	stypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"
)

// SchedulerAPI is the part of the EventBridge Scheduler client the engine uses.
type SchedulerAPI interface {
	CreateSchedule(context.Context, *scheduler.CreateScheduleInput, ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error)
	UpdateSchedule(context.Context, *scheduler.UpdateScheduleInput, ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error)
	DeleteSchedule(context.Context, *scheduler.DeleteScheduleInput, ...func(*scheduler.Options)) (*scheduler.DeleteScheduleOutput, error)
}

var _ SchedulerAPI = (*scheduler.Client)(nil)

// EventBridgeMinEvery is the shortest interval of EventBridge Scheduler's rate
// expressions (1 minute), and every interval there is whole minutes:
// https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#rate-based
const EventBridgeMinEvery = time.Minute

// EventBridge is the AWS engine: one EventBridge Scheduler schedule per schedule, in
// the stack's schedule group, invoking the schedule function (Target) through Role
// with the input {"agent_id", "schedule_id", "fire_at": <aws.scheduler.scheduled-time>}.
// A one-shot is an at() schedule deleted after completion; every is a rate(), cron a
// cron() with ScheduleExpressionTimezone. Nothing runs between fires.
type EventBridge struct {
	API    SchedulerAPI
	Group  string // the stack's schedule group
	Target string // the schedule function's ARN
	Role   string // the role the scheduler assumes to invoke Target
}

var _ Engine = (*EventBridge)(nil)

// FireInput is the schedule function's event, as the scheduler sends it.
type FireInput struct {
	AgentID    string `json:"agent_id"`
	ScheduleID string `json:"schedule_id"`
	FireAt     string `json:"fire_at"`
}

// Name is the scheduler's name of an agent's schedule: names are at most 64 of
// [0-9a-zA-Z-_.], so it is a hash of the pair.
func Name(agentID, id string) string {
	h := sha256.Sum256([]byte(agentID + "\x00" + id))
	return "t-" + hex.EncodeToString(h[:20])
}

// Validate refuses what EventBridge cannot express, naming the field.
func (e *EventBridge) Validate(s Schedule) error {
	_, _, err := expression(s)
	return err
}

// expression is s's schedule expression and its time zone.
func expression(s Schedule) (string, string, error) {
	switch {
	case s.Every != "":
		d, _ := time.ParseDuration(s.Every)
		if d < EventBridgeMinEvery || d%time.Minute != 0 {
			return "", "", bad("every", "on AWS an interval is whole minutes, at least 1m (EventBridge Scheduler's rate), got %s", s.Every)
		}
		m := int64(d / time.Minute)
		switch {
		case m%(24*60) == 0:
			return rate(m/(24*60), "day"), "UTC", nil
		case m%60 == 0:
			return rate(m/60, "hour"), "UTC", nil
		}
		return rate(m, "minute"), "UTC", nil
	case s.Cron != "":
		c, err := awsCron(s.Cron)
		if err != nil {
			return "", "", err
		}
		return "cron(" + c + ")", s.TZ, nil
	default:
		at, err := ParseTime(s.At)
		if err != nil {
			return "", "", bad("at", "not an RFC 3339 time: %q", s.At)
		}
		return "at(" + at.UTC().Format("2006-01-02T15:04:05") + ")", "UTC", nil
	}
}

func rate(n int64, unit string) string {
	if n != 1 {
		unit += "s"
	}
	return "rate(" + strconv.FormatInt(n, 10) + " " + unit + ")"
}

// awsCron turns a 5-field cron into EventBridge's 6 fields (minute hour day-of-month
// month day-of-week year): day-of-week counts from 1 (Sunday) there, and one of the two
// day fields must be "?". Both day fields restricted (standard cron: either matches)
// has no EventBridge equivalent and is refused.
func awsCron(expr string) (string, error) {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return "", bad("cron", "5 fields, got %d", len(f))
	}
	dom, dow := f[2], f[4]
	switch {
	case dow == "*":
		dow = "?"
	case dom == "*":
		dom = "?"
		d, err := shiftDow(dow)
		if err != nil {
			return "", err
		}
		dow = d
	default:
		return "", bad("cron", "on AWS a cron cannot restrict both day-of-month and day-of-week: %q", expr)
	}
	return strings.Join([]string{f[0], f[1], dom, f[3], dow, "*"}, " "), nil
}

// shiftDow renumbers day-of-week numbers from cron's 0–7 (0 and 7: Sunday) to
// EventBridge's 1–7 (1: Sunday); names (MON) stay.
func shiftDow(field string) (string, error) {
	var out []string
	for _, part := range strings.Split(field, ",") {
		body, step, hasStep := strings.Cut(part, "/")
		var ends []string
		for _, v := range strings.Split(body, "-") {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				ends = append(ends, v) // a name or *
			case n < 0 || n > 7:
				return "", bad("cron", "day of week %d out of range 0–7", n)
			default:
				ends = append(ends, strconv.Itoa(n%7+1))
			}
		}
		p := strings.Join(ends, "-")
		if hasStep {
			p += "/" + step
		}
		out = append(out, p)
	}
	return strings.Join(out, ","), nil
}

// Arm creates or replaces s's EventBridge schedule.
func (e *EventBridge) Arm(ctx context.Context, agentID string, s Schedule) error {
	expr, tz, err := expression(s)
	if err != nil {
		return err
	}
	// Not HTML-escaped: EventBridge substitutes the placeholder only as written.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]string{"agent_id": agentID, "schedule_id": s.ID, "fire_at": "<aws.scheduler.scheduled-time>"}); err != nil {
		return err
	}
	in := bytes.TrimSpace(buf.Bytes())
	target := &stypes.Target{Arn: aws.String(e.Target), RoleArn: aws.String(e.Role), Input: aws.String(string(in)),
		// A fire that could not be delivered is tried again for up to an hour; a later
		// fire of the same schedule supersedes it anyway.
		RetryPolicy: &stypes.RetryPolicy{MaximumEventAgeInSeconds: aws.Int32(3600), MaximumRetryAttempts: aws.Int32(185)}}
	off := &stypes.FlexibleTimeWindow{Mode: stypes.FlexibleTimeWindowModeOff}
	after := stypes.ActionAfterCompletionNone
	if s.OneShot() {
		after = stypes.ActionAfterCompletionDelete
	}
	var start *time.Time
	if s.Every != "" {
		if t, err := ParseTime(s.NextAt); err == nil {
			start = &t // a rate counts from its start: the first fire at next_at
		}
	}
	name := Name(agentID, s.ID)
	desc := aws.String(truncate(agentID+" / "+s.ID, 512))
	_, err = e.API.UpdateSchedule(ctx, &scheduler.UpdateScheduleInput{Name: aws.String(name), GroupName: aws.String(e.Group),
		ScheduleExpression: aws.String(expr), ScheduleExpressionTimezone: aws.String(tz), Target: target,
		FlexibleTimeWindow: off, ActionAfterCompletion: after, Description: desc, StartDate: start})
	var nf *stypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		_, err = e.API.CreateSchedule(ctx, &scheduler.CreateScheduleInput{Name: aws.String(name), GroupName: aws.String(e.Group),
			ScheduleExpression: aws.String(expr), ScheduleExpressionTimezone: aws.String(tz), Target: target,
			FlexibleTimeWindow: off, ActionAfterCompletion: after, Description: desc, StartDate: start})
	}
	if err != nil {
		return fmt.Errorf("schedule: EventBridge schedule %s: %w", name, err)
	}
	return nil
}

// Disarm deletes s's EventBridge schedule (already gone: no error).
func (e *EventBridge) Disarm(ctx context.Context, agentID, id string) error {
	_, err := e.API.DeleteSchedule(ctx, &scheduler.DeleteScheduleInput{Name: aws.String(Name(agentID, id)), GroupName: aws.String(e.Group)})
	var nf *stypes.ResourceNotFoundException
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("schedule: delete EventBridge schedule of %s/%s: %w", agentID, id, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
