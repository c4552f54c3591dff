package agent

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// fakeClock advances only when told to.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestChunkerFlushRule(t *testing.T) {
	t.Parallel()
	type delta struct {
		text     string
		boundary bool
		advance  time.Duration
	}
	cases := []struct {
		name   string
		deltas []delta
		want   []string // chunk texts; the last one is final
	}{
		{"tiny token deltas coalesce", []delta{{text: "a"}, {text: "b"}, {text: "c"}, {text: "d"}}, []string{"abcd"}},
		{"size flush", []delta{{text: strings.Repeat("x", 8)}, {text: "y"}, {text: "z"}}, []string{strings.Repeat("x", 8), "yz"}},
		{"age flush", []delta{{text: "a"}, {text: "b", advance: 50 * time.Millisecond}, {text: "c", advance: 150 * time.Millisecond}, {text: "d"}}, []string{"ab", "cd"}},
		{"boundaries give one chunk each", []delta{{text: "a", boundary: true}, {text: "b", boundary: true}, {text: "", boundary: true}}, []string{"a", "b", ""}},
		{"empty deltas without boundary are ignored", []delta{{text: "a"}, {text: ""}, {text: "b"}}, []string{"ab"}},
		{"no text, no chunk", nil, nil},
	}
	for _, c := range cases {
		clock := &fakeClock{t: time.Unix(0, 0)}
		var got []assistantChunk
		ch := &chunker{write: func(a assistantChunk) error { got = append(got, a); return nil }, now: clock.now, flushBytes: 8, flushAge: 100 * time.Millisecond}
		for _, d := range c.deltas {
			clock.t = clock.t.Add(d.advance)
			if err := ch.delta(model.Delta{Text: d.text, Boundary: d.boundary}); err != nil {
				t.Fatal(err)
			}
		}
		usage := &modelUsage{InputTokens: 1, OutputTokens: 2}
		if err := ch.finish(usage); err != nil {
			t.Fatal(err)
		}
		var texts []string
		for i, a := range got {
			texts = append(texts, a.Text)
			last := i == len(got)-1
			if a.Index != i || a.Final != last || (a.Usage != nil) != last {
				t.Errorf("%s: chunk %d = %+v", c.name, i, a)
			}
		}
		if !reflect.DeepEqual(texts, c.want) {
			t.Errorf("%s: chunks %q, want %q", c.name, texts, c.want)
		}
	}
}

func TestChunkerSplitsLongText(t *testing.T) {
	t.Parallel()
	var got []assistantChunk
	ch := &chunker{write: func(a assistantChunk) error { got = append(got, a); return nil }, now: time.Now, flushBytes: 512, flushAge: time.Second}
	long := strings.Repeat("ab", MaxChunkBytes) // 2 × the bound
	if err := ch.delta(model.Delta{Text: long}); err != nil {
		t.Fatal(err)
	}
	if err := ch.finish(nil); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range got {
		enc, _ := json.Marshal(a.Text)
		if len(enc) > MaxChunkBytes {
			t.Errorf("chunk of %d bytes", len(enc))
		}
		b.WriteString(a.Text)
	}
	if len(got) < 2 || b.String() != long || !got[len(got)-1].Final {
		t.Errorf("%d chunks", len(got))
	}
}

func TestBoundTextMatchesEncoding(t *testing.T) {
	t.Parallel()
	alphabet := []string{"a", "é", "✓", "\"", "\\", "\n", "\x01", "<", "&", "\u2028", "\xff", "😀"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range r.IntN(60) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		max := 2 + r.IntN(80)
		cut, truncated := boundText(s, max)
		enc, full := quote(cut), quote(s) // as the log writes it: no HTML escaping
		switch {
		case len(enc) > max:
			t.Fatalf("boundText(%q, %d) = %q encodes to %d bytes", s, max, cut, len(enc))
		case !strings.HasPrefix(s, cut) || (utf8.ValidString(s) && !utf8.ValidString(cut)):
			t.Fatalf("boundText(%q, %d) = %q is not a prefix on a rune boundary", s, max, cut)
		case truncated != (cut != s), !truncated && len(full) > max:
			t.Fatalf("boundText(%q, %d) = %q, %v", s, max, cut, truncated)
		}
	}
}

func ev(typ string, payload any) sessionlog.Event {
	raw, _ := json.Marshal(payload)
	return sessionlog.Event{Type: typ, Payload: raw, At: "2026-01-01T00:00:00.000000Z"}
}

func TestHistoryProjection(t *testing.T) {
	t.Parallel()
	args := json.RawMessage(`{"text":"x"}`)
	evs := []sessionlog.Event{
		ev(sessionlog.TypeSessionCreated, nil),
		ev(TypeUserMessage, userMessage{Text: "wake"}),
		ev(TypeTurnStart, turnStart{TurnID: "t1"}),
		ev(TypeContextInjected, contextInjected{Text: "steer"}),
		ev(TypeAssistantChunk, assistantChunk{Text: "par", Index: 0}), // an output a dead runner never finished
		ev(TypeAssistantChunk, assistantChunk{Text: "Let me ", Index: 0}),
		ev(TypeAssistantChunk, assistantChunk{Text: "see", Index: 1, Final: true}),
		ev(TypeToolCall, toolCall{ID: "c1", Name: "echo", Args: args}),
		ev(TypePolicyUpdated, policyUpdated{Patterns: []string{"*"}}),
		ev(TypeToolCall, toolCall{ID: "c2", Name: "clock", Args: json.RawMessage(`{}`)}),
		ev(TypeApprovalRequested, approvalRequested{CallID: "c1"}),
		ev(TypeToolResult, toolResult{CallID: "c1", Result: json.RawMessage(`{"text":"x"}`)}),
		ev(TypeToolResult, toolResult{CallID: "c2", Error: "not allowed by policy"}),
		ev(TypeToolCall, toolCall{ID: "c3", Name: "echo", Args: args}), // a text-less output
		ev(TypeToolResult, toolResult{CallID: "c3", Result: json.RawMessage(`{}`)}),
		ev(TypeAssistantChunk, assistantChunk{Text: "done", Index: 0, Final: true}),
		ev(TypeTurnEnd, turnEnd{TurnID: "t1", Status: StatusCompleted}),
	}
	want := []model.Message{
		{Role: model.RoleUser, Text: "wake"},
		{Role: model.RoleUser, Text: "steer", Injected: true},
		{Role: model.RoleAssistant, Text: "Let me see", ToolCalls: []model.ToolCall{{ID: "c1", Name: "echo", Args: args}, {ID: "c2", Name: "clock", Args: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "c1", Result: json.RawMessage(`{"text":"x"}`)}, {CallID: "c2", Error: "not allowed by policy"}}},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c3", Name: "echo", Args: args}}},
		{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "c3", Result: json.RawMessage(`{}`)}}},
		{Role: model.RoleAssistant, Text: "done"},
	}
	got := history(evs)
	gotJSON, _ := json.MarshalIndent(got, "", " ")
	wantJSON, _ := json.MarshalIndent(want, "", " ")
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("history:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}

	// The open turn's progress, cut before its final reply: c3 is owed.
	p := progressOf(evs[:14], 2)
	if len(p.owed()) != 1 || p.owed()[0].ID != "c3" || p.last != lastCalls || p.usage.ToolCalls != 3 || !p.requested["c1"] {
		t.Errorf("progress %+v", p)
	}
	if p := progressOf(evs[:16], 2); len(p.owed()) != 0 || p.last != lastFinal {
		t.Errorf("progress after the final reply %+v", p)
	}
	if p := progressOf(evs[:5], 2); p.last != lastPartial {
		t.Errorf("an unfinished output asks for the model again: %+v", p)
	}

	// A window folds each event into the open turn as it is added: at every point its
	// turn is what progressOf reads from the log.
	w := newWindow(nil, "a", 0)
	for i := range evs {
		evs[i].Seq = int64(i) // as the log numbers them: a request's seq is kept (requestSeq)
	}
	for i, e := range evs {
		w.add(e)
		switch {
		case i < 2 || i == len(evs)-1:
			if w.turn != nil {
				t.Errorf("after event %d (%s): open turn %+v, want none", i, e.Type, w.turn)
			}
		case w.turn == nil:
			t.Errorf("after event %d (%s): no open turn, want t1", i, e.Type)
		default:
			if want := progressOf(evs[:i+1], 2); w.turn.seq != 2 || !reflect.DeepEqual(w.turn.progress, want) {
				t.Errorf("after event %d (%s): turn %d %+v, want 2 %+v", i, e.Type, w.turn.seq, w.turn.progress, want)
			}
		}
	}
}

func TestClauses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		c    clauses
		want string
	}{
		{clauses{set: []string{"#a = :a"}}, "SET #a = :a"},
		{clauses{remove: []string{"#owner", "#lease_until"}}, "REMOVE #owner, #lease_until"},
		{clauses{set: []string{"#ck = :ck"}, remove: []string{"#owner", "#turn_id"}, add: []string{"#usage_turns :one", "#quota_tokens :tok"}},
			"SET #ck = :ck REMOVE #owner, #turn_id ADD #usage_turns :one, #quota_tokens :tok"},
		{clauses{}, ""},
	} {
		if got := c.c.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.c, got, c.want)
		}
	}
}
