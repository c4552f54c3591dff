package timer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"
)

// SchedulerAPI is the part of EventBridge Scheduler a Scheduler uses.
type SchedulerAPI interface {
	CreateSchedule(ctx context.Context, in *scheduler.CreateScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error)
	UpdateSchedule(ctx context.Context, in *scheduler.UpdateScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error)
}

// Scheduler is the agent.Timer on AWS: one one-time EventBridge Scheduler schedule per
// approval request, at(expires_at), whose target is the runner function with
// {"agent_id", "expire"} and which deletes itself once it has run
// (ActionAfterCompletion DELETE), so nothing is left to clean up and nothing polls.
// Arming the same request again (an early fire) updates its schedule.
// (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#one-time)
type Scheduler struct {
	API       SchedulerAPI
	Group     string // the schedule group ("default" if empty)
	RunnerARN string // the runner function's ARN
	RoleARN   string // the role EventBridge Scheduler assumes to invoke it
}

// Arm creates (or updates) the request's schedule (agent.Timer). at() takes whole
// seconds in UTC: the moment is rounded up, never early.
func (s *Scheduler) Arm(ctx context.Context, agentID, callID string, at time.Time) error {
	payload, err := json.Marshal(map[string]string{"agent_id": agentID, "expire": callID})
	if err != nil {
		return err
	}
	name := ScheduleName(agentID, callID)
	expr := AtExpression(at)
	target := &types.Target{Arn: aws.String(s.RunnerARN), RoleArn: aws.String(s.RoleARN), Input: aws.String(string(payload))}
	window := &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff}
	group := s.Group
	if group == "" {
		group = "default"
	}
	_, err = s.API.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name: aws.String(name), GroupName: aws.String(group), ScheduleExpression: aws.String(expr),
		ScheduleExpressionTimezone: aws.String("UTC"), FlexibleTimeWindow: window, Target: target,
		ActionAfterCompletion: types.ActionAfterCompletionDelete,
	})
	var conflict *types.ConflictException
	if errors.As(err, &conflict) {
		_, err = s.API.UpdateSchedule(ctx, &scheduler.UpdateScheduleInput{
			Name: aws.String(name), GroupName: aws.String(group), ScheduleExpression: aws.String(expr),
			ScheduleExpressionTimezone: aws.String("UTC"), FlexibleTimeWindow: window, Target: target,
			ActionAfterCompletion: types.ActionAfterCompletionDelete,
		})
	}
	if err != nil {
		return fmt.Errorf("timer: schedule expiry of %s for %s: %w", callID, agentID, err)
	}
	return nil
}

// ScheduleName names the schedule of agentID's request callID: "expire-" and a hash of
// both (a schedule name is at most 64 characters of [0-9a-zA-Z-_.]).
func ScheduleName(agentID, callID string) string {
	h := sha256.Sum256([]byte(agentID + "\x00" + callID))
	return "expire-" + hex.EncodeToString(h[:16])
}

// AtExpression is EventBridge Scheduler's one-time expression for at, in UTC, rounded
// up to the second.
func AtExpression(at time.Time) string {
	at = at.UTC()
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	return "at(" + at.Format("2006-01-02T15:04:05") + ")"
}
