// Package bedrock is the Amazon Bedrock model provider: one model call is one
// ConverseStream request, whose event stream is turned into text deltas, tool calls,
// usage and a stop reason.
//
// The provider is configured by the agent profile; the model name is the Bedrock model
// id or inference profile id / ARN (the part of a "bedrock/MODEL" spec after the
// provider):
//
//	{"max_tokens": 4096, "temperature": 0.2}
//
// Both fields are optional; without them the model's defaults apply. Credentials and
// region come from the AWS config the caller built the bedrockruntime client with.
//
// Wiring:
//
//	cfg, err := bedrock.ParseConfig(raw)                    // raw may be empty
//	p := bedrock.NewProvider(bedrockruntime.NewFromConfig(awsCfg), cfg)
//	m, err := p.Model("anthropic.claude-3-5-haiku-20241022-v1:0")
//	resp, err := m.Stream(ctx, req, onDelta)
package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"

	"github.com/terret/terret-ws/internal/model"
)

// Errors returned by bedrock models. Every error a model returns wraps exactly one of
// them (or the context's error when the call was cancelled); the rest of the message
// names the model and Bedrock's error code and text, with anything that looks like a
// credential removed.
var (
	ErrThrottled      = errors.New("bedrock: throttled")
	ErrAccessDenied   = errors.New("bedrock: access denied")
	ErrInvalidRequest = errors.New("bedrock: invalid request")
	ErrUnavailable    = errors.New("bedrock: model unavailable")
	ErrBadResponse    = errors.New("bedrock: malformed response")
)

// API is the part of the Bedrock runtime client the provider uses.
type API interface {
	ConverseStream(ctx context.Context, in *bedrockruntime.ConverseStreamInput, optFns ...func(*bedrockruntime.Options)) (*bedrockruntime.ConverseStreamOutput, error)
}

var _ API = (*bedrockruntime.Client)(nil)

// Config holds the inference settings applied to every call of the provider's models.
type Config struct {
	MaxTokens   int32    `json:"max_tokens,omitempty"`
	Temperature *float32 `json:"temperature,omitempty"`
}

// ParseConfig parses the provider's JSON config; empty input gives the zero Config.
// It returns an error wrapping ErrInvalidRequest if the JSON is malformed or carries
// unknown fields.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(strings.TrimSpace(string(raw))) == 0 {
		return c, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: config: %v", ErrInvalidRequest, err)
	}
	if c.MaxTokens < 0 {
		return Config{}, fmt.Errorf("%w: config: max_tokens must not be negative", ErrInvalidRequest)
	}
	return c, nil
}

// Provider builds Bedrock models; it implements model.Provider.
type Provider struct {
	api API
	cfg Config
}

var _ model.Provider = (*Provider)(nil)

// NewProvider returns a provider whose models call api with cfg's inference settings.
func NewProvider(api API, cfg Config) *Provider {
	return &Provider{api: api, cfg: cfg}
}

// Model returns the model with the given Bedrock model id. It returns an error wrapping
// model.ErrBadSpec if name is empty.
func (p *Provider) Model(name string) (model.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf("%w: bedrock: empty model id", model.ErrBadSpec)
	}
	return &Model{api: p.api, id: name, cfg: p.cfg}, nil
}

// Model is one Bedrock model; it implements model.Model and is safe for concurrent use.
type Model struct {
	api API
	id  string
	cfg Config
}

var _ model.Model = (*Model)(nil)

// Stream sends req as one ConverseStream call and reads the stream to its end: text
// deltas go to onDelta as they arrive, tool-use blocks are assembled into tool calls,
// the metadata event's token counts become the usage, and the stop reason is
// Bedrock's, with content-filter and guardrail stops reported as model.StopRefusal. A
// stream that ends without
// its messageStop and metadata events is an error (ErrBadResponse), as is a tool call
// whose input is not a JSON object. An exception event in the stream ends the call with an error wrapping
// ErrThrottled, ErrAccessDenied, ErrInvalidRequest or ErrUnavailable; an error from
// onDelta ends it with that error.
func (m *Model) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta) error) (model.Response, error) {
	in, err := m.input(req)
	if err != nil {
		return model.Response{}, err
	}
	out, err := m.api.ConverseStream(ctx, in)
	if err != nil {
		return model.Response{}, m.fail(ctx, err)
	}
	stream := out.GetStream()
	defer stream.Close()

	var a assembler
	events := stream.Events()
	for {
		select {
		case <-ctx.Done():
			return model.Response{}, fmt.Errorf("bedrock: model %s: %w", m.id, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				if err := stream.Err(); err != nil {
					return model.Response{}, m.fail(ctx, err)
				}
				if err := ctx.Err(); err != nil {
					return model.Response{}, fmt.Errorf("bedrock: model %s: %w", m.id, err)
				}
				resp, err := a.response()
				if err != nil {
					return model.Response{}, fmt.Errorf("%w: model %s: %v", ErrBadResponse, m.id, err)
				}
				return resp, nil
			}
			if err := a.add(ev, onDelta); err != nil {
				var bad badResponse
				if errors.As(err, &bad) {
					return model.Response{}, fmt.Errorf("%w: model %s: %v", ErrBadResponse, m.id, err)
				}
				return model.Response{}, err
			}
		}
	}
}

// badResponse marks assembly errors caused by the stream's content (not by onDelta).
type badResponse struct{ msg string }

func (b badResponse) Error() string { return b.msg }

// toolBuilder collects one tool-use block.
type toolBuilder struct {
	id, name string
	input    strings.Builder
}

// assembler folds stream events into a response.
type assembler struct {
	text    strings.Builder
	tools   []*toolBuilder
	byIndex map[int32]*toolBuilder
	stop    string
	stopped bool
	usage   model.Usage
	metered bool
}

func (a *assembler) add(ev types.ConverseStreamOutput, onDelta func(model.Delta) error) error {
	switch e := ev.(type) {
	case *types.ConverseStreamOutputMemberContentBlockStart:
		if start, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
			tb := &toolBuilder{id: deref(start.Value.ToolUseId), name: deref(start.Value.Name)}
			if tb.id == "" || tb.name == "" {
				return badResponse{"tool use block without id or name"}
			}
			if a.byIndex == nil {
				a.byIndex = map[int32]*toolBuilder{}
			}
			a.byIndex[index(e.Value.ContentBlockIndex)] = tb
			a.tools = append(a.tools, tb)
		}
	case *types.ConverseStreamOutputMemberContentBlockDelta:
		switch d := e.Value.Delta.(type) {
		case *types.ContentBlockDeltaMemberText:
			if d.Value == "" {
				return nil
			}
			a.text.WriteString(d.Value)
			if onDelta != nil {
				return onDelta(model.Delta{Text: d.Value})
			}
		case *types.ContentBlockDeltaMemberToolUse:
			tb := a.byIndex[index(e.Value.ContentBlockIndex)]
			if tb == nil {
				return badResponse{fmt.Sprintf("tool input delta for block %d without a tool use start", index(e.Value.ContentBlockIndex))}
			}
			tb.input.WriteString(deref(d.Value.Input))
		}
		// Reasoning, citation and other deltas are not part of the response.
	case *types.ConverseStreamOutputMemberMessageStop:
		a.stop = stopReason(e.Value.StopReason)
		a.stopped = true
	case *types.ConverseStreamOutputMemberMetadata:
		if u := e.Value.Usage; u != nil {
			a.usage = model.Usage{InputTokens: int64(deref(u.InputTokens)), OutputTokens: int64(deref(u.OutputTokens))}
		}
		a.metered = true
	}
	return nil
}

func (a *assembler) response() (model.Response, error) {
	if !a.stopped {
		return model.Response{}, errors.New("stream ended before messageStop")
	}
	if !a.metered {
		// Bedrock closes every stream with a metadata event; without it the stream
		// was cut and the usage would be silently lost.
		return model.Response{}, errors.New("stream ended before metadata")
	}
	resp := model.Response{Text: a.text.String(), StopReason: a.stop, Usage: a.usage}
	for _, tb := range a.tools {
		args, err := objectJSON(tb.input.String())
		if err != nil {
			return model.Response{}, fmt.Errorf("tool %s (%s): %v", tb.name, tb.id, err)
		}
		resp.ToolCalls = append(resp.ToolCalls, model.ToolCall{ID: tb.id, Name: tb.name, Args: args})
	}
	return resp, nil
}

// stopReason maps Bedrock's stop reason to the runtime's: Bedrock already says
// "end_turn" and "tool_use"; a content filter or guardrail stop is a refusal. Others
// ("max_tokens", …) pass through.
func stopReason(r types.StopReason) string {
	switch r {
	case types.StopReasonContentFiltered, types.StopReasonGuardrailIntervened:
		return model.StopRefusal
	default:
		return string(r)
	}
}

// objectJSON validates and compacts a tool input; empty input is the empty object.
func objectJSON(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, errors.New("input is not a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return nil, errors.New("input is not a JSON object")
	}
	return json.RawMessage(buf.Bytes()), nil
}

// fail translates an SDK or stream error into one of the package's errors. The SDK's
// own error is not wrapped: its text can carry request details, so only the error code
// and a scrubbed message survive.
func (m *Model) fail(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("bedrock: model %s: %w", m.id, ctxErr)
	}
	var invalid smithy.InvalidParamsError
	if errors.As(err, &invalid) {
		return fmt.Errorf("%w: model %s: %s", ErrInvalidRequest, m.id, scrub(invalid.Error()))
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.ErrorCode()
		msg := scrub(apiErr.ErrorMessage())
		if msg == "" {
			return fmt.Errorf("%w: model %s: %s", classify(code), m.id, code)
		}
		if code == "ValidationException" && tooLong(msg) {
			// Also a context-length refusal: the runtime compacts and retries once.
			return fmt.Errorf("%w: %w: model %s: %s: %s", classify(code), model.ErrContextLength, m.id, code, msg)
		}
		return fmt.Errorf("%w: model %s: %s: %s", classify(code), m.id, code, msg)
	}
	return fmt.Errorf("%w: model %s: %s", ErrUnavailable, m.id, scrub(err.Error()))
}

// tooLongPattern matches the messages of a ValidationException refusing an input longer
// than the model's window, as Bedrock's models word them ("Input is too long for
// requested model", "prompt is too long", "too many input tokens", "exceeds the
// context window", "maximum context length").
// It is compiled on first use (an error path), not at every cold start: its bounded
// repetitions make it one of the costlier patterns to compile.
var tooLongPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(input is too long|prompt is too long|too many (input )?tokens|context (window|length)|exceeds? .{0,40}(maximum|max) .{0,20}tokens)`)
})

func tooLong(msg string) bool { return tooLongPattern().MatchString(msg) }

// classify maps a Bedrock error code to a sentinel.
func classify(code string) error {
	switch code {
	case "ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException":
		return ErrThrottled
	case "AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
		"ExpiredTokenException", "IncompleteSignature", "MissingAuthenticationToken",
		"InvalidClientTokenId", "NotAuthorized":
		return ErrAccessDenied
	case "ValidationException", "ResourceNotFoundException", "ConflictException":
		return ErrInvalidRequest
	default:
		return ErrUnavailable
	}
}

var (
	keyIDPattern      = regexp.MustCompile(`\b(AKIA|ASIA|AROA|AIDA|ABIA|ACCA)[A-Z0-9]{12,}\b`)
	credentialPattern = regexp.MustCompile(`(?i)(credential|signature|x-amz-security-token|authorization)\s*[=:]\s*[^\s,'"]+`)
)

// maxErrorText bounds provider error text: it is logged durably.
const maxErrorText = 512

// scrub removes credential-looking material from provider error text and bounds it.
func scrub(s string) string {
	s = credentialPattern.ReplaceAllString(s, "$1=[redacted]")
	s = keyIDPattern.ReplaceAllString(s, "[redacted]")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}

func index(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
