package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The beyond phase measures what acting on an agent without a socket costs
// (docs/cost.md, "Exactly-once frames", "Schedules", "Webhooks"): an inject posted over
// HTTP, its repeat with the same Idempotency-Key (a dedup hit), a schedule set over
// HTTP, a schedule's fire and a webhook delivery, each one at a time with the stack
// quiet before the next, in request units and invocations per operation.
//
// The local schedule engine's sweep (a Scan of the agents table twice a second) stands
// in for EventBridge Scheduler, as the stream pollers stand in for Lambda's event source
// mapping: its requests are not counted (beyondCost).

// beyondResult is one operation's cost over Ops operations.
type beyondResult struct {
	Op   string
	Ops  int
	Cost phaseCost
	// Floor is the fewest write units the operation could cost (nil: none stated).
	Floor *float64
	Note  string
}

// beyondOps is how many of each operation the phase measures.
const beyondOps = 5

// beyondSecretVar holds the webhook secret the phase's profile names (secret_env).
const beyondSecretVar = "TERRET_BENCH_WEBHOOK_SECRET"

// beyondCost drops the local schedule engine's sweeps (Scan) from c.
func beyondCost(c phaseCost) phaseCost {
	for k := range c.DDB {
		if k.Op == "Scan" {
			delete(c.DDB, k)
		}
	}
	return c
}

// httpPost posts body to the stack's path with token (and key as Idempotency-Key if
// set) and returns the status.
func (b *bench) httpPost(ctx context.Context, path, token, key string, body any) (int, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	base := "http" + strings.TrimPrefix(b.st.dev.WebSocketURL(), "ws")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, bytes.TrimSpace(answer))
	}
	return resp.StatusCode, nil
}

// beyondAgent makes agent's token and log (unmeasured) and returns the token.
func (b *bench) beyondAgent(ctx context.Context, agentID string) (string, error) {
	tok, err := b.st.tokens.Create(ctx, agentID)
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", agentID, err)
	}
	if _, err := sessionlog.New(b.st.raw, b.st.cfg.LogTable).Create(ctx, agentID); err != nil {
		return "", err
	}
	return tok, nil
}

// awaitLog waits (unmetered reads) until agentID's log satisfies ok.
func (b *bench) awaitLog(ctx context.Context, agentID, what string, ok func([]sessionlog.Event) bool) error {
	l := sessionlog.New(b.st.raw, b.st.cfg.LogTable)
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := l.Read(ctx, agentID, 0, 10000)
		if err != nil {
			return err
		}
		if ok(evs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not in its log after 60 s", agentID, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countType(evs []sessionlog.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// measure runs op ops times, each with the stack quiet before and after, and returns
// the cost of the whole window (local schedule sweeps left out).
func (b *bench) measure(ctx context.Context, ops int, op func(i int) error) (phaseCost, error) {
	b.st.settleAll(ctx, 10*time.Second)
	before := b.st.snap()
	for i := range ops {
		if err := op(i); err != nil {
			return phaseCost{}, err
		}
		b.st.settle(ctx)
	}
	b.st.settleAll(ctx, 10*time.Second)
	return beyondCost(before.to(b.st.snap())), nil
}

func (b *bench) runBeyond(ctx context.Context) error {
	one := 1.0
	add := func(op string, cost phaseCost, floor *float64, note string) {
		b.res.beyond = append(b.res.beyond, beyondResult{Op: op, Ops: beyondOps, Cost: cost, Floor: floor, Note: note})
	}
	// An HTTP inject (short text, no wake, with an Idempotency-Key) on an agent whose
	// inbox queue exists (one earlier inject made it), then its repeat.
	toks := make([]string, beyondOps)
	for i := range beyondOps {
		id := fmt.Sprintf("beyond-inject-%d", i)
		tok, err := b.beyondAgent(ctx, id)
		if err != nil {
			return err
		}
		toks[i] = tok
		if _, err := b.httpPost(ctx, "/agents/"+id+"/frames", tok, id+"-warm", map[string]any{"type": "inject", "text": "warm", "wake": false}); err != nil {
			return err
		}
	}
	frame := func(i int) (string, string, map[string]any) {
		id := fmt.Sprintf("beyond-inject-%d", i)
		return "/agents/" + id + "/frames", id + "-k", map[string]any{"type": "inject", "text": "steer over HTTP", "wake": false}
	}
	cost, err := b.measure(ctx, beyondOps, func(i int) error {
		path, key, body := frame(i)
		_, err := b.httpPost(ctx, path, toks[i], key, body)
		return err
	})
	if err != nil {
		return err
	}
	add("http_inject", cost, &one, "POST /agents/{id}/frames: a short inject with an Idempotency-Key, no wake")
	cost, err = b.measure(ctx, beyondOps, func(i int) error {
		path, key, body := frame(i)
		_, err := b.httpPost(ctx, path, toks[i], key, body)
		return err
	})
	if err != nil {
		return err
	}
	add("http_inject_repeat", cost, nil, "the same POST again (same Idempotency-Key): a dedup hit, nothing queued")

	// A schedule set over HTTP (one-shot, an hour ahead: it does not fire here).
	const sched = "beyond-schedule"
	stok, err := b.beyondAgent(ctx, sched)
	if err != nil {
		return err
	}
	cost, err = b.measure(ctx, beyondOps, func(i int) error {
		_, err := b.httpPost(ctx, "/agents/"+sched+"/schedules", stok, "", map[string]any{"text": "later", "id": fmt.Sprintf("s%d", i), "in": "1h"})
		return err
	})
	if err != nil {
		return err
	}
	add("schedule_set", cost, &one, "POST /agents/{id}/schedules: a one-shot (in 1h)")

	// A fire, and its turn: a one-shot set before the window, fired by the local
	// engine inside it, waking an idle agent (a turn); beside it the same turn from an
	// HTTP inject with wake, so the fire's own part is the difference.
	for _, c := range []struct{ op, note string }{
		{"schedule_fire_with_turn", "a one-shot's fire on an idle agent: schedule/fired, the wake and its whole turn"},
		{"http_wake_with_turn", "POST /agents/{id}/frames: an inject with wake and its whole turn, the same text (the fire's turn without the fire)"},
	} {
		var ftoks []string
		for i := range beyondOps {
			id := fmt.Sprintf("beyond-%s-%d", c.op, i)
			tok, err := b.beyondAgent(ctx, id)
			if err != nil {
				return err
			}
			ftoks = append(ftoks, tok)
		}
		cost, err = b.measure(ctx, beyondOps, func(i int) error {
			id := fmt.Sprintf("beyond-%s-%d", c.op, i)
			if c.op == "http_wake_with_turn" {
				if _, err := b.httpPost(ctx, "/agents/"+id+"/frames", ftoks[i], "", map[string]any{"type": "inject", "text": "wake up", "wake": true}); err != nil {
					return err
				}
			} else {
				// The set is taken out of the window: its cost is the row above.
				at := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
				sb := b.st.snap()
				if _, err := b.httpPost(ctx, "/agents/"+id+"/schedules", ftoks[i], "", map[string]any{"text": "wake up", "id": "fire", "at": at}); err != nil {
					return err
				}
				b.excluded = append(b.excluded, sb.to(b.st.snap()))
			}
			return b.awaitLog(ctx, id, "turn/end", func(evs []sessionlog.Event) bool { return countType(evs, agent.TypeTurnEnd) >= 1 })
		})
		if err != nil {
			return err
		}
		for _, x := range b.excluded {
			cost = subtract(cost, beyondCost(x))
		}
		b.excluded = nil
		add(c.op, cost, nil, c.note)
	}

	// A webhook delivery: set_policy over HTTP (one policy/updated) on an agent without
	// webhooks, then on one whose profile has a webhook for policy/updated, to a local
	// receiver answering 200; the delivery is the difference.
	if err := b.st.dev.EnableWebhooks(ctx); err != nil {
		return err
	}
	var received atomic.Int64
	rv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer rv.Close()
	if err := os.Setenv(beyondSecretVar, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); err != nil {
		return err
	}
	profile, _ := json.Marshal(map[string]any{"webhooks": []map[string]any{{"url": rv.URL + "/hook", "events": []string{"policy/updated"}, "secret_env": beyondSecretVar}}})
	for _, hooked := range []bool{false, true} {
		id := "beyond-policy"
		if hooked {
			id = "beyond-hooked"
		}
		tok, err := b.beyondAgent(ctx, id)
		if err != nil {
			return err
		}
		if hooked {
			if err := agent.PutProfile(ctx, b.st.raw, b.st.tables["AgentsTable"], id, string(profile)); err != nil {
				return fmt.Errorf("profile of %s: %w", id, err)
			}
		}
		cost, err := b.measure(ctx, beyondOps, func(i int) error {
			if _, err := b.httpPost(ctx, "/agents/"+id+"/frames", tok, "", map[string]any{"type": "set_policy", "patterns": []string{fmt.Sprintf("tool-%d", i)}}); err != nil {
				return err
			}
			if !hooked {
				return nil
			}
			deadline := time.Now().Add(60 * time.Second)
			for received.Load() < int64(i+1) {
				if time.Now().After(deadline) {
					return fmt.Errorf("webhook: %d deliveries after 60 s, want %d", received.Load(), i+1)
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if hooked {
			add("set_policy_with_webhook", cost, nil, "POST set_policy on an agent with a webhook for policy/updated, delivered (200 at the first attempt)")
		} else {
			add("set_policy_no_webhook", cost, nil, "POST set_policy on an agent without webhooks (the delivery's baseline)")
		}
	}
	if n := received.Load(); n != beyondOps {
		return fmt.Errorf("webhook: %d deliveries, want %d", n, beyondOps)
	}
	return nil
}

// subtract returns c less x (request counts and units, invocations).
func subtract(c, x phaseCost) phaseCost {
	for k, s := range x.DDB {
		t := c.DDB[k]
		t.Calls -= s.Calls
		t.Errors -= s.Errors
		t.CondFailed -= s.CondFailed
		t.TxCanceled -= s.TxCanceled
		t.RRU -= s.RRU
		t.WRU -= s.WRU
		t.Time -= s.Time
		c.DDB[k] = t
	}
	for k, v := range x.Inv.N {
		c.Inv.N[k] -= v
	}
	for k, v := range x.Inv.Busy {
		c.Inv.Busy[k] -= v
	}
	return c
}
