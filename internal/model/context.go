package model

import (
	"errors"
	"strings"
)

// ErrContextLength is wrapped by a model's error when the provider refused the request
// as longer than the model's context window: the runtime compacts the history and
// retries the step once. Providers recognise their own refusals (openai: HTTP 400 with
// code "context_length_exceeded" or a "maximum context length" message; bedrock: a
// ValidationException saying the input is too long).
var ErrContextLength = errors.New("model: input longer than the context window")

// IsContextLength reports whether err is a provider's context-length refusal.
func IsContextLength(err error) bool { return errors.Is(err, ErrContextLength) }

// DefaultBudgetTokens is the history budget of a model of no known family.
const DefaultBudgetTokens = 100_000

// families maps a model name prefix to its history budget: the family's context
// window less room for the system prompt, the tools and the reply.
var families = []struct {
	prefix string
	budget int64
}{
	{"gpt-3.5", 12_000},
	{"gpt-4o", 96_000},
	{"gpt-4-turbo", 96_000},
	{"gpt-4.1", 400_000},
	{"gpt-4", 6_000}, // the 8K original
	{"o1", 96_000}, {"o3", 150_000}, {"o4", 150_000},
	{"anthropic.claude", 150_000}, {"claude", 150_000},
	{"amazon.nova", 200_000},
	{"meta.llama3", 96_000}, {"llama3", 96_000}, {"llama-3", 96_000},
	{"mistral", 24_000},
}

// BudgetFor is the default history budget, in tokens, of the model of spec: by the
// model name's family (a regional inference-profile prefix such as "us." is ignored),
// else DefaultBudgetTokens (the scripted model too).
func BudgetFor(spec string) int64 {
	_, name, err := ParseSpec(spec)
	if err != nil || name == "" {
		return DefaultBudgetTokens
	}
	name = strings.ToLower(name)
	for _, region := range []string{"us.", "eu.", "apac.", "global."} {
		name = strings.TrimPrefix(name, region)
	}
	for _, f := range families {
		if strings.HasPrefix(name, f.prefix) {
			return f.budget
		}
	}
	return DefaultBudgetTokens
}

// EstimateTokens is the token estimate of n bytes of text: one token per four bytes,
// rounded up. It is what the scripted model reports and what the runtime counts where
// no provider figure applies.
func EstimateTokens(n int) int64 { return int64((n + 3) / 4) }
