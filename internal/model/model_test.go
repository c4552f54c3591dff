package model_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/model"
)

type stream struct {
	deltas []model.Delta
	at     []time.Time
}

func (s *stream) on(d model.Delta) error {
	s.deltas = append(s.deltas, d)
	s.at = append(s.at, time.Now())
	return nil
}

func (s *stream) texts() []string {
	var out []string
	for _, d := range s.deltas {
		out = append(out, d.Text)
	}
	return out
}

func user(text string) model.Message { return model.Message{Role: model.RoleUser, Text: text} }
func injected(text string) model.Message {
	return model.Message{Role: model.RoleUser, Text: text, Injected: true}
}
func assistant(text string) model.Message {
	return model.Message{Role: model.RoleAssistant, Text: text}
}

func TestScriptedPlainText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		msgs []model.Message
		want string
	}{
		{"newest user message", []model.Message{user("first"), assistant("first"), user("hello there")}, "hello there"},
		{"injected context is newer", []model.Message{user("wake"), injected("steer")}, "steer"},
		{"one rune still two chunks", []model.Message{user("x")}, "x"},
		{"multibyte", []model.Message{user("héllo wörld ✓")}, "héllo wörld ✓"},
	}
	for _, c := range cases {
		var s stream
		resp, err := model.NewScripted().Stream(context.Background(), model.Request{Messages: c.msgs}, s.on)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(s.deltas) < 2 || strings.Join(s.texts(), "") != c.want || resp.Text != c.want {
			t.Errorf("%s: deltas %q, text %q; want ≥2 deltas concatenating to %q", c.name, s.texts(), resp.Text, c.want)
		}
		for _, d := range s.deltas {
			if !d.Boundary {
				t.Errorf("%s: scripted delta without Boundary", c.name)
			}
		}
		if resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
			t.Errorf("%s: usage %+v", c.name, resp.Usage)
		}
	}
	var s stream
	resp, err := model.NewScripted().Stream(context.Background(), model.Request{Messages: []model.Message{user("")}}, s.on)
	if err != nil || len(s.deltas) != 0 || resp.Text != "" || len(resp.ToolCalls) != 0 {
		t.Errorf("empty text: %+v %q %v", resp, s.texts(), err)
	}
}

func TestScriptedSteps(t *testing.T) {
	t.Parallel()
	script := `{"script":[
		{"say":"abcdef","chunks":3,"delay_ms":30},
		{"call":[{"tool":"echo","args":{"text":"x"}},{"tool":"clock"}]},
		{"fail":"boom here"},
		{"refuse":"no way"}
	]}`
	// The step is the number of assistant messages after the waking text; injected
	// context does not move it.
	steps := [][]model.Message{
		{user(script)},
		{user(script), assistant("abcdef"), injected("steer")},
		{user(script), assistant("abcdef"), assistant("")},
		{user(script), assistant(""), assistant(""), assistant("")},
		{user(script), assistant(""), assistant(""), assistant(""), assistant("")},
	}
	ctx := context.Background()

	var s0 stream
	resp, err := model.NewScripted().Stream(ctx, model.Request{Messages: steps[0]}, s0.on)
	if err != nil || strings.Join(s0.texts(), "|") != "ab|cd|ef" || resp.StopReason != model.StopEndTurn {
		t.Fatalf("say: %q %+v %v", s0.texts(), resp, err)
	}
	if gap := s0.at[2].Sub(s0.at[0]); gap < 60*time.Millisecond {
		t.Errorf("say with delay_ms 30 took %v for 3 chunks", gap)
	}

	var s1 stream
	resp, err = model.NewScripted().Stream(ctx, model.Request{Messages: steps[1]}, s1.on)
	if err != nil || len(s1.deltas) != 0 || len(resp.ToolCalls) != 2 {
		t.Fatalf("call: %+v %v", resp, err)
	}
	if c := resp.ToolCalls[0]; c.Name != "echo" || string(c.Args) != `{"text":"x"}` || c.ID == "" {
		t.Errorf("call 0: %+v", c)
	}
	if c := resp.ToolCalls[1]; c.Name != "clock" || string(c.Args) != `{}` || c.ID == resp.ToolCalls[0].ID {
		t.Errorf("call 1: %+v", c)
	}

	if _, err := model.NewScripted().Stream(ctx, model.Request{Messages: steps[2]}, nil); err == nil || err.Error() != "boom here" {
		t.Errorf("fail: %v, want exactly the message", err)
	}

	resp, err = model.NewScripted().Stream(ctx, model.Request{Messages: steps[3]}, nil)
	if err != nil || !model.IsRefusal(resp.StopReason) || resp.Text != "no way" {
		t.Errorf("refuse: %+v %v", resp, err)
	}

	var s4 stream
	resp, err = model.NewScripted().Stream(ctx, model.Request{Messages: steps[4]}, s4.on)
	if err != nil || resp.Text != "" || len(resp.ToolCalls) != 0 || len(s4.deltas) != 0 {
		t.Errorf("used up: %+v %v", resp, err)
	}

	for _, bad := range []string{`{"script":3}`, `{"script":[{"say":"a","fail":"b"}]}`, `{"script":[{"say":"a","chunks":0}]}`, `{"script":[{"call":[{"args":{}}]}]}`} {
		if _, err := model.NewScripted().Stream(ctx, model.Request{Messages: []model.Message{user(bad)}}, nil); err == nil {
			t.Errorf("script %s did not fail", bad)
		}
	}
	// A JSON object without "script" is plain text.
	var s5 stream
	if resp, err := model.NewScripted().Stream(ctx, model.Request{Messages: []model.Message{user(`{"a":1}`)}}, s5.on); err != nil || resp.Text != `{"a":1}` {
		t.Errorf("non-script JSON: %+v %v", resp, err)
	}
}

type provider struct{ known string }

func (p provider) Model(name string) (model.Model, error) {
	if name != p.known {
		return nil, errors.New("no such model")
	}
	return model.NewScripted(), nil
}

func TestRegistryResolve(t *testing.T) {
	t.Parallel()
	r := model.NewRegistry()
	if err := r.Register("acme", provider{known: "big/v1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("scripted", provider{}); !errors.Is(err, model.ErrBadSpec) {
		t.Errorf("registering provider scripted: %v", err)
	}
	if _, err := r.Resolve("scripted"); err != nil {
		t.Errorf("scripted: %v", err)
	}
	if _, err := r.Resolve("acme/big/v1:0"); err != nil {
		t.Errorf("acme/big/v1:0: %v", err)
	}
	cases := map[string]error{
		"":             model.ErrBadSpec,
		"acme":         model.ErrBadSpec,
		"acme/":        model.ErrBadSpec,
		"/x":           model.ErrBadSpec,
		"Acme/x":       model.ErrBadSpec,
		"acme/a b":     model.ErrBadSpec,
		"acme/other":   model.ErrBadSpec,
		"nobody/x":     model.ErrUnknownProvider,
		"scripted/any": model.ErrBadSpec,
		strings.Repeat("p", model.MaxProviderName+1) + "/x": model.ErrBadSpec,
		strings.Repeat("p", model.MaxProviderName) + "/x":   model.ErrUnknownProvider,
		"-acme/x": model.ErrBadSpec,
	}
	for spec, want := range cases {
		_, err := r.Resolve(spec)
		if !errors.Is(err, want) || !errors.Is(err, model.ErrBadSpec) {
			t.Errorf("Resolve(%q) = %v, want %v (and ErrBadSpec)", spec, err, want)
		}
	}
}

func TestValidProviderName(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "acme": true, "0-a_b": true, strings.Repeat("p", model.MaxProviderName): true,
		"": false, strings.Repeat("p", model.MaxProviderName+1): false, "-a": false, "_a": false,
		"Acme": false, "a.b": false, "a/b": false, "a\n": false,
	} {
		if got := model.ValidProviderName(name); got != want {
			t.Errorf("ValidProviderName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestBudgetFor(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want int64
	}{
		{"scripted", model.DefaultBudgetTokens},
		{"openai/gpt-4o-mini", 96_000},
		{"bedrock/us.anthropic.claude-3-5-sonnet-20240620-v1:0", 150_000},
		{"acme/mistral-small", 24_000},
		{"acme/gpt-4", 6_000},
		{"local/some-new-model", model.DefaultBudgetTokens},
	} {
		if got := model.BudgetFor(tt.spec); got != tt.want {
			t.Errorf("BudgetFor(%q) = %d, want %d", tt.spec, got, tt.want)
		}
	}
}
