package agent

// The agent's state item's attributes, as state's and Counters' dynamodbav tags spell
// them: every expression the store writes names them by these constants, never by a
// literal (TestStateAttrsNamed checks the tags against stateAttrs).
const (
	attrOwner      = "owner"       // state.Runner, the runner holding the lease
	attrLeaseUntil = "lease_until" // state.LeaseUntil, the lease's last millisecond
	attrPending    = "pending"     // state.Stimuli, the stimulus counter

	attrTurnID       = "turn_id"       // state.TurnID, the recorded turn
	attrTurnSeq      = "turn_seq"      // state.TurnSeq, a lower bound of its first seq
	attrTurnKey      = "turn_key"      // state.TurnKey, the stamp key of its wake
	attrTurnRules    = "turn_rules"    // state.TurnRules, its pinned rules
	attrTurnWake     = "turn_wake"     // state.TurnWake, its inline waking inject
	attrCancelTurn   = "cancel_turn"   // state.CancelTurn, the turn a cancel was asked for
	attrCancelReason = "cancel_reason" // state.CancelReason

	attrCancelAt       = "cancel_at"        // state.CancelAt, the latest cancel owed
	attrCancelAtReason = "cancel_at_reason" // state.CancelAtReason

	attrModelMain      = "model_main"      // state.ModelMain
	attrModelTitler    = "model_titler"    // state.ModelTitler
	attrModelCompactor = "model_compactor" // state.ModelCompactor

	attrPolicyAt   = "policy_at"   // state.PolicyAt, the newest claimed policy/updated's key
	attrPolicySeq  = "policy_seq"  // state.PolicySeq, and its seq
	attrPolicySeen = "policy_seen" // the newest set_policy received (seePolicy)

	attrProfile      = "profile"       // state.Profile, the per-agent profile override
	attrInbox        = "inbox"         // state.Inbox, the injects queued inline
	attrCk           = "ck"            // state.Ck, the runner's checkpoint
	attrQuotaRefused = "quota_refused" // state.QuotaRefused

	attrUsageTurns        = "usage_turns"         // Counters.Turns
	attrUsageInputTokens  = "usage_input_tokens"  // Counters.InputTokens
	attrUsageOutputTokens = "usage_output_tokens" // Counters.OutputTokens
	attrUsageModelCalls   = "usage_model_calls"   // Counters.ModelCalls
	attrUsageToolCalls    = "usage_tool_calls"    // Counters.ToolCalls
	attrUsageWallMS       = "usage_wall_ms"       // Counters.WallMS
	attrQuotaDay          = "quota_day"           // Counters.QuotaDay
	attrQuotaTurns        = "quota_turns"         // Counters.QuotaTurns
	attrQuotaMonth        = "quota_month"         // Counters.QuotaMonth
	attrQuotaTokens       = "quota_tokens"        // Counters.QuotaTokens
)

// stateAttrs is every attribute of the state item, for TestStateAttrsNamed; the inbox
// bound's counters and the cancel wait's are named in inboxbound.go, the owning
// connection in owner.go.
var stateAttrs = []string{
	attrOwner, attrLeaseUntil, attrPending,
	attrTurnID, attrTurnSeq, attrTurnKey, attrTurnRules, attrTurnWake, attrCancelTurn, attrCancelReason,
	attrCancelAt, attrCancelAtReason,
	attrModelMain, attrModelTitler, attrModelCompactor,
	attrPolicyAt, attrPolicySeq, attrPolicySeen,
	attrProfile, attrInbox, attrCk, attrQuotaRefused,
	attrUsageTurns, attrUsageInputTokens, attrUsageOutputTokens, attrUsageModelCalls, attrUsageToolCalls, attrUsageWallMS,
	attrQuotaDay, attrQuotaTurns, attrQuotaMonth, attrQuotaTokens,
	attrInboxItems, attrInboxBytes, attrCancelWaiting, attrCancelWaitUntil, attrConn,
}
