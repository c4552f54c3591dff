package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	stypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"
)

// TestExpression: each spec's EventBridge Scheduler expression and zone, and what
// EventBridge cannot express refused naming the field.
func TestExpression(t *testing.T) {
	now := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	b := Bounds{MinEvery: time.Second}
	tests := []struct {
		spec       Spec
		expr, zone string
		field      string
	}{
		{Spec{At: "2026-03-01T10:00:00+01:00"}, "at(2026-03-01T09:00:00)", "UTC", ""},
		{Spec{Every: "5m"}, "rate(5 minutes)", "UTC", ""},
		{Spec{Every: "1m"}, "rate(1 minute)", "UTC", ""},
		{Spec{Every: "2h"}, "rate(2 hours)", "UTC", ""},
		{Spec{Every: "48h"}, "rate(2 days)", "UTC", ""},
		{Spec{Every: "30s"}, "", "", "every"},
		{Spec{Every: "90s"}, "", "", "every"},
		{Spec{Cron: "0 9 * * 1-5", TZ: "Europe/Paris"}, "cron(0 9 ? * 2-6 *)", "Europe/Paris", ""},
		{Spec{Cron: "30 6 1 * *"}, "cron(30 6 1 * ? *)", "UTC", ""},
		{Spec{Cron: "0 0 * * 0,6"}, "cron(0 0 ? * 1,7 *)", "UTC", ""},
		{Spec{Cron: "0 0 1 * 1"}, "", "", "cron"},
	}
	for _, tt := range tests {
		tt.spec.Text = "x"
		s, err := Build(tt.spec, b, now)
		if err != nil {
			t.Fatal(err)
		}
		expr, zone, err := expression(s)
		var se *SpecError
		if tt.field != "" {
			if !errors.As(err, &se) || se.Field != tt.field {
				t.Errorf("%+v: %v, want a bad spec naming %s", tt.spec, err, tt.field)
			}
			continue
		}
		if err != nil || expr != tt.expr || zone != tt.zone {
			t.Errorf("%+v: %q %q %v, want %q %q", tt.spec, expr, zone, err, tt.expr, tt.zone)
		}
	}
}

// recorder records the scheduler calls (the AWS API's requests are what this checks).
type recorder struct {
	created []*scheduler.CreateScheduleInput
	deleted []string
}

func (r *recorder) CreateSchedule(_ context.Context, in *scheduler.CreateScheduleInput, _ ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error) {
	r.created = append(r.created, in)
	return &scheduler.CreateScheduleOutput{}, nil
}

func (r *recorder) UpdateSchedule(context.Context, *scheduler.UpdateScheduleInput, ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error) {
	return nil, &stypes.ResourceNotFoundException{}
}

func (r *recorder) DeleteSchedule(_ context.Context, in *scheduler.DeleteScheduleInput, _ ...func(*scheduler.Options)) (*scheduler.DeleteScheduleOutput, error) {
	r.deleted = append(r.deleted, *in.Name)
	return nil, &stypes.ResourceNotFoundException{}
}

// TestEventBridgeArm: a one-shot is created in the group, deleted after completion,
// targeting the function through the role with the scheduled time as fire_at; a
// disarm of a schedule already gone is no error.
func TestEventBridgeArm(t *testing.T) {
	r := &recorder{}
	e := &EventBridge{API: r, Group: "g", Target: "arn:fn", Role: "arn:role"}
	s, _ := Build(Spec{Text: "x", In: "1h", ID: "one"}, Bounds{}, time.Now())
	if err := e.Arm(context.Background(), "a1", s); err != nil {
		t.Fatal(err)
	}
	in := r.created[0]
	if *in.GroupName != "g" || *in.Name != Name("a1", "one") || len(*in.Name) > 64 || in.ActionAfterCompletion != stypes.ActionAfterCompletionDelete ||
		*in.Target.Arn != "arn:fn" || *in.Target.RoleArn != "arn:role" || *in.Target.Input != `{"agent_id":"a1","fire_at":"<aws.scheduler.scheduled-time>","schedule_id":"one"}` ||
		in.FlexibleTimeWindow.Mode != stypes.FlexibleTimeWindowModeOff {
		t.Fatalf("CreateSchedule group %s name %s after %s target %s role %s input %s window %s", *in.GroupName, *in.Name, in.ActionAfterCompletion, *in.Target.Arn, *in.Target.RoleArn, *in.Target.Input, in.FlexibleTimeWindow.Mode)
	}
	if err := e.Disarm(context.Background(), "a1", "one"); err != nil || r.deleted[0] != Name("a1", "one") {
		t.Fatalf("Disarm: %v %v", err, r.deleted)
	}
}
