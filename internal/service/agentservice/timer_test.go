package agentservice

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/config"
)

// TestAWSTimer: on AWS an approval's expiry is a one-time schedule in the stack's group
// that invokes the runner, in the schedule target's account and region, through the
// scheduler's role.
func TestAWSTimer(t *testing.T) {
	cfg := config.Config{
		ScheduleGroup:  "st-schedules",
		ScheduleTarget: "arn:aws:lambda:eu-west-1:123456789012:function:st-schedule",
		ScheduleRole:   "arn:aws:iam::123456789012:role/st-SchedulerRole-X",
		RunnerFunction: "st-runner",
	}
	tm := AWSTimer(cfg, aws.Config{Region: "eu-west-1"})
	if tm.RunnerARN != "arn:aws:lambda:eu-west-1:123456789012:function:st-runner" || tm.Group != "st-schedules" || tm.RoleARN != cfg.ScheduleRole || tm.API == nil {
		t.Errorf("AWSTimer = %+v, want the runner's ARN, the stack's group and the scheduler's role", tm)
	}
}
