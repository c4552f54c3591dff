package agent

import (
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/tools"
)

// The runtime's metrics, recorded on the process's default recorder (package metrics:
// an EMF line on stdout, no API call). Every dimension is bounded: a turn status from
// the closed set, a provider and a model from the profile's or the deployment's specs,
// a tool name from the agent's built tool set.
//
//	Turns{status}                           Count
//	ModelLatency{provider, model}           Milliseconds, one point per model call
//	ModelInputTokens, ModelOutputTokens     Count, by provider and model
//	ModelErrors{provider, model}            Count, a call that failed
//	ToolCalls{tool}, ToolErrors{tool}       Count, per executed call and per failed one
//	RunnerHandovers                         Count, an invocation handing over before its deadline

func meterTurn(status string) {
	metrics.Add("Turns", metrics.Count, 1, metrics.Dim{Name: "status", Value: status})
}

// modelDims names spec's provider and model. A model that no profile or deployment
// setting names (a client's set_model may name any) is "other", so a client cannot
// grow the metric's dimension values; the provider is always a configured one.
func (c *core) modelDims(prof tools.Profile, spec string) []metrics.Dim {
	provider, name, ok := strings.Cut(spec, "/")
	if !ok {
		name = spec // "scripted"
	}
	switch spec {
	case prof.Models.Main, prof.Models.Titler, prof.Models.Compactor, c.cfg.MainModel, c.cfg.TitlerModel:
	default:
		name = "other"
	}
	return []metrics.Dim{{Name: "provider", Value: provider}, {Name: "model", Value: name}}
}

// meterModel records one model call that took d.
func meterModel(dims []metrics.Dim, d time.Duration, u model.Usage, err error) {
	if err != nil {
		metrics.Add("ModelErrors", metrics.Count, 1, dims...)
		return
	}
	metrics.Add("ModelLatency", metrics.Milliseconds, float64(d.Milliseconds()), dims...)
	metrics.Add("ModelInputTokens", metrics.Count, float64(u.InputTokens), dims...)
	metrics.Add("ModelOutputTokens", metrics.Count, float64(u.OutputTokens), dims...)
}

// meterTools records the executed calls of a run (a call refused before running is
// not a tool call).
func meterTools(plans []plan) {
	for _, pl := range plans {
		if pl.tool == nil {
			continue
		}
		dim := metrics.Dim{Name: "tool", Value: pl.tool.Definition().Name}
		metrics.Add("ToolCalls", metrics.Count, 1, dim)
		if pl.errText != "" {
			metrics.Add("ToolErrors", metrics.Count, 1, dim)
		}
	}
}
