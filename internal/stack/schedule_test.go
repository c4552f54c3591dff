package stack

import (
	"strings"
	"testing"
)

// TestSchedulerRole: EventBridge Scheduler assumes SchedulerRole, trusted to
// scheduler.amazonaws.com alone for this account's schedules of this stack's group,
// and it may invoke the schedule function and nothing else; the group is the stack's.
func TestSchedulerRole(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	if got := s.String("Resources", "ScheduleGroup", "Type"); got != "AWS::Scheduler::ScheduleGroup" {
		t.Fatalf("ScheduleGroup is %q, want an AWS::Scheduler::ScheduleGroup", got)
	}
	if got := s.String("Resources", "ScheduleGroup", "Properties", "Name"); !strings.Contains(got, "${AWS::StackName}") {
		t.Errorf("ScheduleGroup Name %q: one group per stack, named for it", got)
	}
	trust := s.Get("Resources", "SchedulerRole", "Properties", "AssumeRolePolicyDocument", "Statement").([]any)
	if len(trust) != 1 {
		t.Fatalf("SchedulerRole trusts %d statements, want 1", len(trust))
	}
	st := trust[0].(map[string]any)
	if svc := st["Principal"].(map[string]any)["Service"]; svc != "scheduler.amazonaws.com" || st["Action"] != "sts:AssumeRole" {
		t.Errorf("SchedulerRole trusts %v to %v, want scheduler.amazonaws.com to sts:AssumeRole", svc, st["Action"])
	}
	cond, _ := st["Condition"].(map[string]any)
	if cond["StringEquals"].(map[string]any)["aws:SourceAccount"] != "${AWS::AccountId}" ||
		cond["ArnLike"].(map[string]any)["aws:SourceArn"] != scheduleARN {
		t.Errorf("SchedulerRole trust condition %v, want this account's schedules of the group %s (confused deputy)", cond, scheduleARN)
	}
	pols := s.Get("Resources", "SchedulerRole", "Properties", "Policies").([]any)
	var grants []string
	for _, p := range pols {
		for _, st := range p.(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			m := st.(map[string]any)
			grants = append(grants, m["Effect"].(string)+" "+asString(m["Action"])+" "+asString(m["Resource"]))
		}
	}
	want := []string{"Allow lambda:InvokeFunction " + lambdaARN + "${AWS::StackName}-schedule", "Allow lambda:InvokeFunction " + lambdaARN + "${AWS::StackName}-runner"}
	if !equalSets(grants, want) {
		t.Errorf("SchedulerRole grants %v, want %v", grants, want)
	}
	for _, fn := range []string{"RunnerFunction", "ScheduleFunction"} {
		if got := s.String("Resources", fn, "Properties", "Environment", "Variables", "SCHEDULE_GROUP"); got != "${ScheduleGroup}" {
			t.Errorf("%s SCHEDULE_GROUP = %q, want the stack's group", fn, got)
		}
	}
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, asString(e))
		}
		return strings.Join(out, ",")
	}
	return ""
}
