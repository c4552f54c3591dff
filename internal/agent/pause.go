package agent

// Pause points: where the runtime calls Config.Pause, which holds it there until the
// hook returns. Tests use them to act while the runtime is known to be at a step
// (hold PauseRun, send a frame, release) and to know that something has happened
// or is over (PauseQueued, PauseCancelRecorded, PauseReturned) instead of sleeping
// for it. Unlike a crash point, a pause changes nothing: the runtime carries on
// from where it was held, its lease kept alive by its heartbeat meanwhile.
const (
	// PauseRun: a runner has read the state at a step boundary and planned a run of
	// tools, none executed yet. A frame served while it is held is seen at the next
	// boundary, after the run.
	PauseRun = "run"
	// PauseChunk: a runner has logged an assistant/chunk. Unless the chunk is the
	// answer's final one, the model is still streaming and the step boundary after
	// the answer has not come.
	PauseChunk = "chunk"
	// PauseReturned: a runner invocation (Runner.Run) is returning; whatever it
	// appended is in the log.
	PauseReturned = "returned"
	// PauseQueueing: the message function has checked an inject (over HTTP, after
	// reading the log's epoch) and is about to queue it in the agent's inbox.
	PauseQueueing = "queueing"
	// PauseQueued: the message function has queued an inject in the agent's inbox
	// and counted the stimulus; the runner is not yet invoked.
	PauseQueued = "queued"
	// PauseCancelRecorded: the message function has recorded a cancel on the running
	// turn; the runner is not yet invoked.
	PauseCancelRecorded = "cancel_recorded"
	// PausePolicyRead: a set_policy has read the claimed policy's stamp and found its
	// own not below it; nothing is logged yet.
	PausePolicyRead = "policy_read"
	// PausePolicyLogged: a set_policy has logged its policy/updated; it is not claimed
	// yet.
	PausePolicyLogged = "policy_logged"
)

// pause calls Config.Pause, if set, at point for agentID.
func (c *core) pause(point, agentID string) {
	if c.cfg.Pause != nil {
		c.cfg.Pause(point, agentID)
	}
}

// pauseAfter returns write, followed by a pause at point.
func (rn *activeRun) pauseAfter(point string, write func(assistantChunk) error) func(assistantChunk) error {
	return func(c assistantChunk) error {
		err := write(c)
		rn.c.pause(point, rn.agent)
		return err
	}
}
