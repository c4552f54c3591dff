package timer_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/terret/terret-ws/internal/timer"
)

// schedules records the requests a Scheduler makes; a second create of one name is a
// ConflictException, as the service answers.
type schedules struct {
	created map[string]*scheduler.CreateScheduleInput
	updated []*scheduler.UpdateScheduleInput
}

func (s *schedules) CreateSchedule(_ context.Context, in *scheduler.CreateScheduleInput, _ ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error) {
	if _, dup := s.created[aws.ToString(in.Name)]; dup {
		return nil, &types.ConflictException{Message: aws.String("exists")}
	}
	s.created[aws.ToString(in.Name)] = in
	return &scheduler.CreateScheduleOutput{}, nil
}

func (s *schedules) UpdateSchedule(_ context.Context, in *scheduler.UpdateScheduleInput, _ ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error) {
	s.updated = append(s.updated, in)
	return &scheduler.UpdateScheduleOutput{}, nil
}

func TestAtExpression(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), "at(2030-01-02T03:04:05)"},
		{time.Date(2030, 1, 2, 3, 4, 5, 1, time.UTC), "at(2030-01-02T03:04:06)"}, // never early
		{time.Date(2030, 1, 2, 4, 4, 5, 0, time.FixedZone("X", 3600)), "at(2030-01-02T03:04:05)"},
	} {
		if got := timer.AtExpression(tc.at); got != tc.want {
			t.Errorf("AtExpression(%v) = %s, want %s", tc.at, got, tc.want)
		}
	}
}

// TestSchedulerArm: one one-time schedule per request, deleting itself after it ran,
// targeting the runner with the expiry's event; arming again updates it.
func TestSchedulerArm(t *testing.T) {
	api := &schedules{created: map[string]*scheduler.CreateScheduleInput{}}
	s := &timer.Scheduler{API: api, Group: "terret", RunnerARN: "arn:runner", RoleARN: "arn:role"}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.Arm(context.Background(), "agent-1", "call_1", at); err != nil {
		t.Fatal(err)
	}
	name := timer.ScheduleName("agent-1", "call_1")
	in := api.created[name]
	if in == nil || len(name) > 64 || aws.ToString(in.GroupName) != "terret" || aws.ToString(in.ScheduleExpression) != "at(2030-01-02T03:04:05)" ||
		aws.ToString(in.ScheduleExpressionTimezone) != "UTC" || in.ActionAfterCompletion != types.ActionAfterCompletionDelete ||
		in.FlexibleTimeWindow.Mode != types.FlexibleTimeWindowModeOff ||
		aws.ToString(in.Target.Arn) != "arn:runner" || aws.ToString(in.Target.RoleArn) != "arn:role" {
		t.Fatalf("schedule %s: %+v", name, in)
	}
	var ev map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(in.Target.Input)), &ev); err != nil || ev["agent_id"] != "agent-1" || ev["expire"] != "call_1" || len(ev) != 2 {
		t.Errorf("target input %s", aws.ToString(in.Target.Input))
	}
	if err := s.Arm(context.Background(), "agent-1", "call_1", at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if len(api.updated) != 1 || aws.ToString(api.updated[0].ScheduleExpression) != "at(2030-01-02T03:05:05)" {
		t.Errorf("arming again: updates %+v", api.updated)
	}
	if timer.ScheduleName("agent-1", "call_2") == name {
		t.Errorf("two requests share a schedule name")
	}
}
