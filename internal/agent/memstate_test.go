package agent

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/lease"
)

// memState is the in-memory double of the runner's state rules (runnerState): each
// method is the Go reading of the store's conditional write, beside the condition it
// mirrors. state_contract_test.go holds it to the store on DynamoDB Local.
type memState struct {
	mu     sync.Mutex
	agents map[string]*state
}

var _ runnerState = (*memState)(nil)

func newMemState() *memState { return &memState{agents: map[string]*state{}} }

// item is agentID's state item, created as an UpdateItem creates a missing one.
func (m *memState) item(agentID string) *state {
	st, ok := m.agents[agentID]
	if !ok {
		st = &state{}
		m.agents[agentID] = st
	}
	return st
}

// copyState is st as a read returns it: nothing shared with the double's own.
func copyState(st *state) state {
	cp := *st
	if st.TurnWake != nil {
		w := *st.TurnWake
		cp.TurnWake = &w
	}
	cp.Inbox = maps.Clone(st.Inbox)
	if st.Ck != nil {
		ck := *st.Ck
		cp.Ck = &ck
	}
	return cp
}

// mine: "#owner = :me".
func mine(st *state, me string) bool { return st.Runner == me }

// wakeQueued: "attribute_exists(#inbox.#q)" for an inline wake; an inbox item of its
// own (or a wake already on the turn) is not checked.
func wakeQueued(st *state, c *claim) bool {
	if c.wake.attr == "" || c.wake.attr == attrTurnWake {
		return true
	}
	_, ok := st.Inbox[c.wake.ID]
	return ok
}

// applyClaim is claim.apply's actions.
func applyClaim(st *state, c *claim) {
	st.TurnID, st.TurnSeq, st.TurnKey = c.turnID, c.seq, c.wake.key()
	st.CancelTurn, st.CancelReason = "", ""
	if c.rules != "" {
		st.TurnRules = c.rules
	}
	if c.wake.attr == "" || c.wake.attr == attrTurnWake {
		return
	}
	w := c.wake
	w.attr = attrTurnWake
	st.TurnWake = &w
	delete(st.Inbox, c.wake.ID)
}

// applyFinish is finishing's actions.
func applyFinish(st *state, u TurnUsage) {
	st.TurnID, st.TurnSeq, st.TurnKey, st.TurnWake, st.CancelTurn, st.CancelReason, st.TurnRules = "", 0, "", nil, "", "", ""
	st.Turns++
	st.InputTokens += u.InputTokens
	st.OutputTokens += u.OutputTokens
	st.ModelCalls += u.ModelCalls
	st.ToolCalls += u.ToolCalls
	st.WallMS += u.WallMS
	st.QuotaTurns++
	st.QuotaTokens += u.InputTokens + u.OutputTokens
}

func (m *memState) acquire(_ context.Context, agentID, me string, now, until time.Time, c *claim) (state, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	// (attribute_not_exists(#owner) OR #lease_until < :now OR #owner = :me)
	free := st.Runner == "" || !lease.LiveMs(st.LeaseUntil, now.UnixMilli()) || mine(st, me)
	// AND attribute_not_exists(#turn_id) AND the inline wake still queued
	if !free || (c != nil && (st.TurnID != "" || !wakeQueued(st, c))) {
		return copyState(st), false, nil
	}
	st.Runner, st.LeaseUntil = me, until.UnixMilli()
	if c != nil {
		applyClaim(st, c)
	}
	return copyState(st), true, nil
}

func (m *memState) renew(_ context.Context, agentID, me string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	if !mine(st, me) {
		return errLeaseLost
	}
	st.LeaseUntil = until.UnixMilli()
	return nil
}

func (m *memState) release(_ context.Context, agentID, me string, pending optional[int64], ended *endedTurn, ck *checkpoint) (state, bool, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	// #owner = :me [AND #pending = :p] [AND #turn_id = :t]
	if !mine(st, me) || (pending.ok && st.Stimuli != pending.v) || (ended != nil && st.TurnID != ended.id) {
		return copyState(st), !mine(st, me), false, nil
	}
	st.Runner, st.LeaseUntil = "", 0
	if ended != nil {
		applyFinish(st, ended.usage)
	}
	if ck != nil {
		c := *ck
		c.put = nil
		st.Ck = &c
	}
	return copyState(st), true, true, nil
}

func (m *memState) claimTurn(_ context.Context, agentID, me string, c claim) (state, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	if !mine(st, me) || !wakeQueued(st, &c) {
		return state{}, errLeaseLost
	}
	applyClaim(st, &c)
	return copyState(st), nil
}

// foundTurn is foundMine: a write whose turn condition failed returns the item as
// found to its holder, errLeaseLost to anyone else.
func foundTurn(st *state, me string) (state, error) {
	if !mine(st, me) {
		return state{}, errLeaseLost
	}
	return copyState(st), nil
}

func (m *memState) clearTurn(_ context.Context, agentID, me, turnID string) (state, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	if !mine(st, me) || st.TurnID != turnID {
		return foundTurn(st, me)
	}
	st.TurnID, st.TurnSeq, st.TurnKey, st.TurnWake, st.CancelTurn, st.CancelReason, st.TurnRules = "", 0, "", nil, "", "", ""
	return copyState(st), nil
}

func (m *memState) finishTurn(_ context.Context, agentID, me, turnID string, u TurnUsage) (state, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	if !mine(st, me) || st.TurnID != turnID {
		return foundTurn(st, me)
	}
	applyFinish(st, u)
	return copyState(st), nil
}

func (m *memState) bump(_ context.Context, agentID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.item(agentID).Stimuli++
	return nil
}

// errNotModelled: the double queues inline injects only.
var errNotModelled = errors.New("memState: an inject of its own is not modelled")

func (m *memState) putInbox(_ context.Context, agentID string, it inboxItem) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.item(agentID)
	if len(it.Text) > InlineTextBytes || len(st.Inbox) >= MaxInline {
		return false, errNotModelled
	}
	if st.Inbox == nil {
		st.Inbox = map[string]inboxItem{}
	}
	it.attr = attrInbox
	st.Inbox[it.ID] = it
	st.Stimuli++
	return true, nil
}

// inboxRead is the inbox items of their own (none: the double queues inline only) and
// the state item.
func (m *memState) inboxRead(ctx context.Context, agentID string) ([]inboxItem, state, error) {
	st, err := m.getState(ctx, agentID)
	return nil, st, err
}

func (m *memState) getState(_ context.Context, agentID string, _ ...string) (state, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.agents[agentID]; ok {
		return copyState(st), nil
	}
	return state{}, nil
}
