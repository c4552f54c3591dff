// Package agent is the agent runtime: the turn loop that drives a model and its tools
// and records everything it does in the session log, and the Service that serves
// the client frames driving it (inject, cancel, approve, deny, set_model,
// set_policy).
//
// Two halves share this package. Service serves the frames inside the message
// function: it records each stimulus durably (the inbox, the state item, the log) and
// starts the runner function asynchronously. Runner runs in the runner function: it
// takes the agent's lease, rebuilds the agent from the log and runs or resumes the
// turn loop until the agent is idle, parked on an approval, or its invocation is
// about to time out (then it hands over to a fresh invocation of itself). Nothing is
// kept in process between invocations: the log and AgentsTable are the whole state.
// docs/lifecycle.md describes the lifecycle, docs/events.md the events.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// Log is the part of the session log the runtime uses. Whatever should follow an
// append (the delivery fast path) is the Log's business: wrap it, as
// sessionlog.Notify does.
type Log interface {
	// AppendIn and AppendInAt append fenced by the epoch the writer read
	// (sessionlog.Fence): the runner under its lease, the message route's set_policy
	// and verdicts with a transaction's check of seq 0.
	AppendIn(ctx context.Context, agentID string, f sessionlog.Fence, typ string, payload any, stamp string) (sessionlog.Event, error)
	AppendInAt(ctx context.Context, agentID string, f sessionlog.Fence, seq int64, typ string, payload any) (sessionlog.Event, error)
	Epoch(ctx context.Context, agentID string) (string, error)
	// AppendInAtStamped puts an event at exactly seq of the log of f.Epoch, stamped
	// (sessionlog.ErrConflict if seq is taken, ErrEpoch if the log is another one):
	// set_policy's compare-and-append under expect_seq.
	AppendInAtStamped(ctx context.Context, agentID string, f sessionlog.Fence, seq int64, typ string, payload any, stamp string) (sessionlog.Event, error)
	Read(ctx context.Context, agentID string, from int64, limit int) ([]sessionlog.Event, error)
	Tip(ctx context.Context, agentID string) (int64, error)
	// Expire sets an event's TTL (retention: only for events the checkpoint passed).
	Expire(ctx context.Context, agentID string, seq, expiresAt int64) error
}

var _ Log = (*sessionlog.Log)(nil)

// Invoker starts the runner function. invoke.Client is one; `terret dev` serves the
// same Invoke API locally.
type Invoker interface {
	Invoke(ctx context.Context, in *invoke.Input) (*invoke.Output, error)
}

var _ Invoker = (*invoke.Client)(nil)

// RunnerEvent is the runner function's event: {"agent_id": "..."}, or the quota
// sweep's QuotaSweepInput.
type RunnerEvent struct {
	AgentID string `json:"agent_id"`
	Sweep   string `json:"sweep,omitempty"`
	// Expire, with AgentID, is a timer's event (Timer): the approval request of this
	// call id expires, then the agent's turn goes on.
	Expire string `json:"expire,omitempty"`
}

// Model roles set_model accepts.
const (
	RoleMain   = profile.RoleMain
	RoleTitler = profile.RoleTitler
	// RoleCompactor writes the summaries of compacted history (compact.go); by
	// default the main model.
	RoleCompactor = profile.RoleCompactor
)

// Defaults of Config.
const (
	DefaultLeaseDuration  = 15 * time.Second
	DefaultDeadlineMargin = 2 * time.Minute
	DefaultChunkBytes     = 512
	DefaultChunkInterval  = 200 * time.Millisecond
)

// ErrCrashed is returned by Run when Config.Crash stopped it (tests only).
var ErrCrashed = errors.New("agent: runner stopped by crash hook")

// Config configures a Service and a Runner. Log, DB, AgentsTable, Invoker and
// RunnerFunction are required; the rest have defaults.
type Config struct {
	Log            Log
	DB             DB
	AgentsTable    string
	Invoker        Invoker
	RunnerFunction string // name or ARN of the runner function

	Models  *model.Registry // nil: the scripted model only
	Tools   *tools.Registry // nil: the builtin (demo) tools only
	Profile *tools.Profile  // the deployment's default profile; nil: tools.DefaultProfile()
	// Profiles, when set, replaces Profile and Models: the default profile is read
	// from it at every model step (a profile file may have changed), and each
	// profile's models come from its providers.
	Profiles    Profiles
	MainModel   string // spec of role main when the agent set none; "": scripted
	TitlerModel string // spec of role titler when the agent set none; "": scripted
	Approvals   bool   // the approvals plugin row is mounted
	// Rules compiles profiles' rules over tool arguments (package rules). nil: a
	// profile with rules cannot run tools here (its calls fail, naming the cause).
	Rules RuleCompiler
	// Answer, if set, answers a client whose queued inject the runner dropped as stale
	// (expect_seq); nil: the drop is only logged.
	Answer Answerer
	// Timer fires approval requests' expiries (approval.expires_in); nil: a request
	// waits for a verdict, however its tool entry is configured.
	Timer Timer
	// RetentionDays (the deployment's RETENTION_DAYS; a profile's retention_days wins)
	// expires log events that many days after they were appended, once the checkpoint
	// has passed them (retention.go); 0: keep them forever.
	RetentionDays int

	Now            func() time.Time // nil: time.Now
	LeaseDuration  time.Duration    // a runner's lease, renewed every third of it; 0: DefaultLeaseDuration
	DeadlineMargin time.Duration    // hand over when the invocation has less left; 0: DefaultDeadlineMargin
	ChunkBytes     int              // chunk flush size; 0: DefaultChunkBytes
	ChunkInterval  time.Duration    // chunk flush age; 0: DefaultChunkInterval

	Logger *slog.Logger

	// Crash, if set, is asked at named points of the runner and of SetPolicy (the Crash* constants);
	// returning true stops the invocation right there, abandoning its lease and state
	// as a killed process would. For tests.
	Crash func(point string) bool
	Pause func(point, agentID string) // if set, called at the Pause* points (pause.go); for tests
}

// Crash points of the runner.
const (
	CrashUserMessage   = "user_message"   // the waking user/message is logged, turn/start not yet
	CrashBeforeRelease = "before_release" // the invocation's work is logged; its release (and checkpoint) not written
	CrashCompacted     = "compacted"      // a context/compacted is logged, the step's model call not made
	CrashInboxRead     = "inbox_read"     // inbox items read for a drain, nothing logged yet
	CrashInboxLogged   = "inbox_logged"   // context/injected logged, inbox items not yet deleted
	CrashToolCalls     = "tool_calls"     // the model output and its tool/call events are logged, no tool ran
	CrashToolRun       = "tool_run"       // a run of tools executed, its tool/result events not logged
	CrashParked        = "parked"         // approval/requested logged, lease not yet released
	CrashTurnEnded     = "turn_ended"     // turn/end logged, the state item not yet updated
	CrashAfterAcquire  = "after_acquire"  // the lease is taken, with the claim of the turn to start when there is one; nothing logged
	CrashQuotaStarted  = "quota_started"  // a quota-refused turn's turn/start is logged, its turn/end not yet
)

// Crash points of the message function (SetPolicy returns ErrCrashed there).
const (
	CrashPolicyLogged   = "policy_logged"   // a set_policy's policy/updated is logged, not yet claimed
	CrashPolicyRepeated = "policy_repeated" // a policy/updated repeated after a stale one is logged, not yet claimed
)

// Profiles supplies the runtime's profiles; profile.Source is one.
type Profiles interface {
	// Default returns the deployment's default profile as of now.
	Default() tools.Profile
	// Models returns the models the providers of p serve (the scripted model always);
	// an error says which provider or key could not be set up.
	Models(p tools.Profile) (*model.Registry, error)
}

// core is what Service and Runner share.
type core struct {
	cfg     Config
	log     Log
	store   *store
	models  *model.Registry
	tools   *tools.Registry
	profile tools.Profile
	now     func() time.Time
	logger  *slog.Logger
}

func newCore(cfg Config) (*core, error) {
	if cfg.Log == nil || cfg.DB == nil || cfg.AgentsTable == "" || cfg.Invoker == nil || cfg.RunnerFunction == "" {
		return nil, errors.New("agent: Config needs Log, DB, AgentsTable, Invoker and RunnerFunction")
	}
	c := &core{cfg: cfg, log: cfg.Log, store: &store{db: cfg.DB, table: cfg.AgentsTable},
		models: cfg.Models, tools: cfg.Tools, now: cfg.Now, logger: cfg.Logger}
	if c.models == nil {
		c.models = model.NewRegistry()
	}
	if c.tools == nil {
		c.tools = tools.NewRegistry()
	}
	if cfg.Profile != nil {
		c.profile = *cfg.Profile
	} else {
		c.profile = tools.DefaultProfile()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.cfg.MainModel == "" {
		c.cfg.MainModel = model.SpecScripted
	}
	if c.cfg.TitlerModel == "" {
		c.cfg.TitlerModel = model.SpecScripted
	}
	if c.cfg.LeaseDuration <= 0 {
		c.cfg.LeaseDuration = DefaultLeaseDuration
	}
	if c.cfg.DeadlineMargin <= 0 {
		c.cfg.DeadlineMargin = DefaultDeadlineMargin
	}
	if c.cfg.ChunkBytes <= 0 {
		c.cfg.ChunkBytes = DefaultChunkBytes
	}
	if c.cfg.ChunkInterval <= 0 {
		c.cfg.ChunkInterval = DefaultChunkInterval
	}
	return c, nil
}

// stamp is the protocol.Stamp of the frame being served (from ctx), or now for a call
// that serves none.
func (c *core) stamp(ctx context.Context) protocol.Stamp {
	if st, ok := protocol.StampFrom(ctx); ok {
		return st
	}
	return protocol.Stamp{At: c.now().UnixMilli(), InOrder: true}
}

// invoke starts the runner for agentID asynchronously (InvocationType Event).
func (c *core) invoke(ctx context.Context, agentID string) error {
	payload, err := json.Marshal(RunnerEvent{AgentID: agentID})
	if err != nil {
		return err
	}
	_, err = c.cfg.Invoker.Invoke(ctx, &invoke.Input{
		FunctionName:   c.cfg.RunnerFunction,
		InvocationType: invoke.Event,
		Payload:        payload,
	})
	if err != nil {
		return fmt.Errorf("agent: start runner for %s: %w", agentID, err)
	}
	return nil
}

// modelSpec is the spec of role for an agent whose state item holds st and whose
// profile is prof: set_model's choice, else the profile's, else the deployment's.
// A set_model choice the profile no longer allows (allowed_models changed since) is
// passed over, so an operator's bound holds for choices made before it.
func (c *core) modelSpec(st state, prof tools.Profile, role string) string {
	set := st.ModelMain
	switch role {
	case RoleTitler:
		set = st.ModelTitler
	case RoleCompactor:
		set = st.ModelCompactor
	}
	if set != "" && !c.allowsModel(prof, role, set) {
		set = ""
	}
	switch role {
	case RoleTitler:
		return firstOf(set, prof.Models.Titler, c.cfg.TitlerModel)
	case RoleCompactor:
		return firstOf(set, prof.Models.Compactor, c.modelSpec(st, prof, RoleMain))
	default:
		return firstOf(set, prof.Models.Main, c.cfg.MainModel)
	}
}

// allowsModel is profile.AllowsModel for role of an agent of this deployment: a profile
// that configures no providers also allows the deployment's own role models, scripted
// only for a role the deployment runs it in.
func (c *core) allowsModel(prof tools.Profile, role, spec string) bool {
	return profile.AllowsModel(prof, role, spec, profile.Deployment{Main: c.cfg.MainModel, Titler: c.cfg.TitlerModel})
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// agentProfile is the default profile with the agent's override (JSON, "" for none)
// merged over it.
func (c *core) agentProfile(overrideJSON string) (tools.Profile, error) {
	prof := c.profile
	if c.cfg.Profiles != nil {
		prof = c.cfg.Profiles.Default()
	}
	if overrideJSON == "" {
		return prof, nil
	}
	over, err := tools.DecodeProfile([]byte(overrideJSON))
	if err != nil {
		return tools.Profile{}, fmt.Errorf("the agent's stored profile: %w", err)
	}
	return prof.Merge(over), nil
}

// modelsOf returns the models prof's providers serve.
func (c *core) modelsOf(prof tools.Profile) (*model.Registry, error) {
	if c.cfg.Profiles != nil {
		return c.cfg.Profiles.Models(prof)
	}
	return c.models, nil
}

// resolveVerdict appends approval/resolved for callID if, and only if, callID has a
// standing request in the open turn of the log, atomically with that check: the event
// is put with AppendAt at exactly the seq after the events it was validated against,
// so an event landing in between (another verdict above all) makes the put fail, and
// the check is made again on the newer log; the put is fenced by the epoch of the
// events it was checked against, so a reset or delete in between appends nothing. It returns ErrStaleCall, appending
// nothing, when no request stands. w must reach back at least to the open turn's
// turn/start.
func (c *core) resolveVerdict(ctx context.Context, agentID string, w *logWindow, callID, verdictText, reason string) error {
	reason, _ = boundText(reason, MaxReasonBytes)
	for attempt := 0; ; attempt++ {
		if w.turn == nil || !w.turn.stands(callID) {
			return ErrStaleCall
		}
		epoch, err := w.epochOf(ctx)
		if errors.Is(err, sessionlog.ErrEpoch) {
			return ErrStaleCall // the log is gone, and its turn with it
		}
		if err != nil {
			return err
		}
		ev, err := c.log.AppendInAt(ctx, agentID, sessionlog.Fence{Epoch: epoch}, w.last+1, TypeApprovalResolved, approvalResolved{CallID: callID, Verdict: verdictText, Reason: reason, ClientID: control.FrameFrom(ctx).ClientID})
		if err == nil {
			w.add(ev)
			return nil
		}
		if errors.Is(err, sessionlog.ErrEpoch) {
			return ErrStaleCall // reset or deleted since the check: its turn is in no log now
		}
		if !errors.Is(err, sessionlog.ErrConflict) {
			return fmt.Errorf("agent: record verdict on %s for %s: %w", callID, agentID, err)
		}
		if attempt >= 50 {
			return fmt.Errorf("agent: record verdict on %s for %s: log too busy", callID, agentID)
		}
		if err := w.refresh(ctx); err != nil {
			return err
		}
	}
}
