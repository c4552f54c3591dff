package devstack

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/service/agentservice"
)

// scheduleFunction is the schedule function as terret dev runs it: in-process, its
// handler over the same firer the deployed function builds (rebound to its bootstrap
// under --lambda-emulator).
func (st *Stack) scheduleFunction(awsCfg aws.Config, logger *slog.Logger) (*localgw.Deferred, error) {
	firer, err := agentservice.ScheduleFirer(st.Config, awsCfg, logger, nil)
	if err != nil {
		return nil, err
	}
	fn := &localgw.Deferred{}
	fn.Bind(perCall(agentservice.ScheduleHandler(firer, logger)))
	return fn, nil
}

// startSchedules starts the local engine of schedules (schedule.Local): it arms every
// schedule of the tables — a fire that came due while terret dev was down fires now,
// as one — and sweeps the records every second, delivering each fire to the schedule
// function as EventBridge Scheduler does on AWS.
func (st *Stack) startSchedules(ctx context.Context, awsCfg aws.Config, fn *localgw.Deferred, logger *slog.Logger) error {
	records := agentservice.Schedules(st.Config, awsCfg, logger, nil, nil)
	st.schedules = schedule.NewLocal(logger)
	st.schedules.Deliver = func(ctx context.Context, in schedule.FireInput) error {
		payload, err := json.Marshal(in)
		if err != nil {
			return err
		}
		_, err = fn.Invoke(ctx, payload)
		return err
	}
	return st.schedules.Start(ctx, records)
}
