package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// console adds what a person running the stack wants to see and the deployed functions
// do not log: one line per client frame and per turn start and end. A failed turn is
// logged at Error, so it shows at every log level. It reads copies of the events the
// handlers get and changes nothing they see.
type console struct {
	log    *slog.Logger
	agents sync.Map // connection id → agent id, from $connect until $disconnect
}

// connect wraps the $connect handler to learn which agent a connection talks to.
func (c *console) connect(h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		var req events.APIGatewayWebsocketProxyRequest
		if json.Unmarshal(payload, &req) == nil {
			c.agents.Store(req.RequestContext.ConnectionID, req.QueryStringParameters["agent_id"])
		}
		return h.Invoke(ctx, payload)
	})
}

// disconnect wraps the $disconnect handler to forget the connection.
func (c *console) disconnect(h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		var req events.APIGatewayWebsocketProxyRequest
		if json.Unmarshal(payload, &req) == nil {
			defer c.agents.Delete(req.RequestContext.ConnectionID)
		}
		return h.Invoke(ctx, payload)
	})
}

// frame wraps the $default handler: one line per frame, naming its type and the fields
// that identify what it does (never an inject's text).
func (c *console) frame(h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		if c.log.Enabled(ctx, slog.LevelInfo) {
			var req events.APIGatewayWebsocketProxyRequest
			if json.Unmarshal(payload, &req) == nil {
				c.log.Info("frame", c.frameAttrs(req)...)
			}
		}
		return h.Invoke(ctx, payload)
	})
}

func (c *console) frameAttrs(req events.APIGatewayWebsocketProxyRequest) []any {
	connID := req.RequestContext.ConnectionID
	attrs := []any{}
	if a, ok := c.agents.Load(connID); ok {
		attrs = append(attrs, "agent_id", a)
	}
	attrs = append(attrs, "connection_id", connID)
	var f struct {
		Type    string `json:"type"`
		FromSeq *int64 `json:"from_seq"`
		Wake    *bool  `json:"wake"`
		Text    string `json:"text"`
		CallID  string `json:"call_id"`
		Role    string `json:"role"`
		Spec    string `json:"spec"`
	}
	if req.IsBase64Encoded {
		return append(attrs, "type", "(binary frame)", "bytes", len(req.Body))
	}
	// The problem in the words of the bad_frame reply the client gets: a frame that is
	// JSON but lacks "type" is not "not JSON" (a dev run only: the frame is parsed twice).
	var bad string
	if _, err := protocol.Parse([]byte(req.Body)); err != nil {
		bad = err.Error()
		if be := (*protocol.BadFrameError)(nil); errors.As(err, &be) {
			bad = be.Message
		}
	}
	if json.Unmarshal([]byte(req.Body), &f) != nil || f.Type == "" {
		return append(attrs, "type", "(bad frame)", "bad_frame", bad, "bytes", len(req.Body))
	}
	attrs = append(attrs, "type", f.Type)
	if bad != "" {
		attrs = append(attrs, "bad_frame", bad)
	}
	switch {
	case f.FromSeq != nil:
		attrs = append(attrs, "from_seq", *f.FromSeq)
	case f.Type == "inject":
		attrs = append(attrs, "chars", len([]rune(f.Text)))
		if f.Wake != nil {
			attrs = append(attrs, "wake", *f.Wake)
		}
	case f.CallID != "":
		attrs = append(attrs, "call_id", f.CallID)
	case f.Role != "":
		attrs = append(attrs, "role", f.Role, "spec", f.Spec)
	}
	return attrs
}

// turns wraps the deliver function: for a log table stream batch, one line per
// turn/start and turn/end in it. A batch the stream retries prints its lines again.
func (c *console) turns(h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		c.logTurns(ctx, payload)
		return h.Invoke(ctx, payload)
	})
}

func (c *console) logTurns(ctx context.Context, payload []byte) {
	var batch events.DynamoDBEvent
	if json.Unmarshal(payload, &batch) != nil {
		return
	}
	for _, r := range batch.Records {
		if r.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue
		}
		ev, err := sessionlog.FromImage(r.Change.NewImage)
		if err != nil || (ev.Type != agent.TypeTurnStart && ev.Type != agent.TypeTurnEnd) {
			continue
		}
		session, body := ev.SessionID, ev.Payload
		var p struct {
			TurnID string `json:"turn_id"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(body, &p)
		switch {
		case ev.Type == agent.TypeTurnStart:
			c.log.InfoContext(ctx, "turn started", "agent_id", session, "turn_id", p.TurnID)
		case p.Status == agent.StatusFailed:
			c.log.ErrorContext(ctx, "turn failed", "agent_id", session, "turn_id", p.TurnID, "reason", p.Reason)
		case p.Reason != "":
			c.log.InfoContext(ctx, "turn ended", "agent_id", session, "turn_id", p.TurnID, "status", p.Status, "reason", p.Reason)
		default:
			c.log.InfoContext(ctx, "turn ended", "agent_id", session, "turn_id", p.TurnID, "status", p.Status)
		}
	}
}

// perCall is lambda.NewHandler(fn) for concurrent callers. The SDK's handler returns
// bytes of a pooled buffer that it has already put back for the next invocation —
// harmless in Lambda, which invokes one at a time, but a data race when the gateway
// and the stream pollers invoke one handler at once. A handler per call has a pool of
// its own; building one costs microseconds.
func perCall(fn any) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		return lambda.NewHandler(fn).Invoke(ctx, payload)
	})
}

// handlerFunc is a lambda.Handler from a function.
type handlerFunc func(ctx context.Context, payload []byte) ([]byte, error)

func (f handlerFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f(ctx, payload)
}

// quiet lowers its handler's Info records to Debug: the gateway's and the stream
// poller's own chatter (listening, mapping started, shard found) is not news on the
// console, where the socket handlers already log each connection.
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return q.Handler.Enabled(ctx, l)
}

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return q.Handler.Handle(ctx, r)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }
func (q quiet) WithGroup(name string) slog.Handler    { return quiet{q.Handler.WithGroup(name)} }

// withoutRunnerTurnFailed drops the runner's own "turn failed" record (its one line in
// CloudWatch): the console logs every failed turn from the log's stream, in order after
// the turn's "turn started", so the runner's copy would print it twice, and first.
type withoutRunnerTurnFailed struct{ slog.Handler }

func (w withoutRunnerTurnFailed) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "turn failed" {
		return nil
	}
	return w.Handler.Handle(ctx, r)
}

func (w withoutRunnerTurnFailed) WithAttrs(as []slog.Attr) slog.Handler {
	return withoutRunnerTurnFailed{w.Handler.WithAttrs(as)}
}

func (w withoutRunnerTurnFailed) WithGroup(name string) slog.Handler {
	return withoutRunnerTurnFailed{w.Handler.WithGroup(name)}
}
