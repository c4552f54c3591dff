package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/tools"
)

// allowing is the demo profile with allowed_models set to globs.
func allowing(globs ...string) *tools.Profile {
	p := tools.DefaultProfile()
	p.AllowedModels = globs
	return &p
}

// echoModel answers with the text of the newest user message, so a test sees what the
// model was given.
type echoModel struct{ name string }

func (m echoModel) Stream(_ context.Context, req model.Request, onDelta func(model.Delta) error) (model.Response, error) {
	text := m.name + ":"
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == model.RoleUser {
			text += req.Messages[i].Text
			break
		}
	}
	if err := onDelta(model.Delta{Text: text}); err != nil {
		return model.Response{}, err
	}
	return model.Response{Text: text, StopReason: model.StopEndTurn}, nil
}

func echoModels(t *testing.T) *model.Registry {
	t.Helper()
	models := model.NewRegistry()
	if err := models.Register("acme", providerFunc(func(name string) (model.Model, error) { return echoModel{name}, nil })); err != nil {
		t.Fatal(err)
	}
	return models
}

// TestSetModelOutsideAllowedModels: a set_model outside allowed_models is ErrBadSpec
// and changes nothing; one inside takes effect.
func TestSetModelOutsideAllowedModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{models: echoModels(t), profile: allowing("acme/good-*")})
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "acme/good-1"); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"scripted", "acme/bad", "acme/good"} {
		err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, spec)
		if !errorsIs(err, agent.ErrBadSpec) || !strings.Contains(err.Error(), "not among the models this agent's profile allows (allowed_models)") {
			t.Errorf("SetModel(main, %s) = %v, want ErrBadSpec naming allowed_models", spec, err)
		}
	}
	e.inject("hi", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if got := chunkText(evs); got != "good-1:hi" {
		t.Errorf("reply %q, want acme/good-1's: the refused set_model changed nothing", got)
	}
}

// TestAllowedModelsDefault: a profile with providers and no allowed_models allows only
// the models it names; scripted is refused, and a waking text that looks like a script
// reaches the model as plain text: no tool runs.
func TestAllowedModelsDefault(t *testing.T) {
	t.Parallel()
	p := tools.DefaultProfile()
	p.Models.Main, p.Models.Titler = "acme/main", "acme/title"
	p.Providers = map[string]json.RawMessage{"acme": json.RawMessage(`{"kind":"openai","base_url":"http://127.0.0.1:1/v1"}`)}
	e := newEnv(t, opts{models: echoModels(t), profile: &p})
	for _, spec := range []string{"scripted", "acme/other", "bedrock/anthropic.claude"} {
		if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, spec); !errorsIs(err, agent.ErrBadSpec) {
			t.Errorf("SetModel(main, %s) = %v, want ErrBadSpec", spec, err)
		}
	}
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "acme/title"); err != nil {
		t.Errorf("SetModel(main, acme/title), a model the profile names: %v", err)
	}
	text := script(`{"call":[{"tool":"echo","args":{"text":"pwned"}}]}`, `{"say":"done"}`)
	e.inject(text, true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if got := chunkText(evs); got != "title:"+text {
		t.Errorf("reply %q, want the model's echo of the script as plain text", got)
	}
	if n := count(evs, agent.TypeToolCall); n != 0 {
		t.Errorf("%d tool calls: the script ran", n)
	}
}

// TestAllowedModelsDeploymentDefault: a profile without providers on a deployment
// whose main model is real and whose titler is scripted (the template's default
// TitlerModel) lets set_model put scripted on the titler only: a token holder cannot
// switch main to scripted, and a script-like waking text stays plain text for the model.
func TestAllowedModelsDeploymentDefault(t *testing.T) {
	t.Parallel()
	p := tools.DefaultProfile()
	e := newEnv(t, opts{models: echoModels(t), profile: &p})
	e.restart(func(c *agent.Config) { c.MainModel, c.TitlerModel = "acme/main", model.SpecScripted })
	for _, role := range []string{agent.RoleMain, agent.RoleCompactor} {
		err := e.svc.SetModel(e.ctx, e.agentID, role, model.SpecScripted)
		if !errorsIs(err, agent.ErrBadSpec) || !strings.Contains(err.Error(), "(allowed_models)") {
			t.Errorf("SetModel(%s, scripted) = %v, want ErrBadSpec naming allowed_models", role, err)
		}
	}
	for _, c := range []struct{ role, spec string }{{agent.RoleTitler, model.SpecScripted}, {agent.RoleTitler, "acme/main"}, {agent.RoleTitler, model.SpecScripted}} {
		if err := e.svc.SetModel(e.ctx, e.agentID, c.role, c.spec); err != nil {
			t.Errorf("SetModel(%s, %s), the deployment's own model: %v", c.role, c.spec, err)
		}
	}
	text := script(`{"call":[{"tool":"echo","args":{"text":"pwned"}}]}`, `{"say":"done"}`)
	e.inject(text, true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if got := chunkText(evs); got != "main:"+text {
		t.Errorf("reply %q, want acme/main's echo of the script as plain text", got)
	}
	if n := count(evs, agent.TypeToolCall); n != 0 {
		t.Errorf("%d tool calls: the script ran", n)
	}
}

// TestSetModelChoicePassedOver: a set_model choice the profile stops allowing (an
// operator narrowed allowed_models) is not used: the profile's own model runs.
func TestSetModelChoicePassedOver(t *testing.T) {
	t.Parallel()
	wide := allowing("acme/*")
	wide.Models.Main = "acme/own"
	e := newEnv(t, opts{models: echoModels(t), profile: wide})
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "acme/chosen"); err != nil {
		t.Fatal(err)
	}
	narrow := allowing("acme/own")
	narrow.Models.Main = "acme/own"
	e.restart(func(c *agent.Config) { c.Profile = narrow })
	e.inject("hi", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if got := chunkText(evs); got != "own:hi" {
		t.Errorf("reply %q, want the profile's acme/own: the chosen model is no longer allowed", got)
	}
}
