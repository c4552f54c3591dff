package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The history fold (docs/architecture.md, "The history fold"). Below its checkpoint
// the runner keeps the model's history in fold items of the agents table — pk
// "agent#<id>", sk "fold#<from, 20 digits>" — each the fold of the log's events from
// seq from to seq to: the events the model's history is made of (user/message,
// context/injected, tool/call, tool/result, context/compacted), each model output's
// assistant/chunk events merged into one (or a few, when long), turn/start and turn/end
// as bare marks, and every other event dropped, its share of the budget (eventTokens)
// carried by the next event kept. history() of a fold is history() of its events, and
// the compaction's estimates over it are the estimates over the events. A release that
// moves the checkpoint past events writes their fold first, so the pieces cover the log
// without a gap from the checkpoint's floor (the first seq the history needs: the newest
// compaction's through_seq + 1, 0 while there is none) up to its seq; a runner reads
// them back newest first with one Query bounded by the floor — what the model's
// history holds (at most the budget, past which the runner compacts), not the number of
// events the log has. The log stays the truth: when a piece is missing, the events of
// the gap are read and folded again (they never expire above the floor).

const (
	foldPrefix = "fold#"
	// maxPieceBytes bounds one fold item's events (an item is at most 400 KB); a fold
	// longer than it is written as several items.
	maxPieceBytes = 48 << 10
	// maxMergedText bounds the text of one merged assistant/chunk: a longer output is
	// kept as several, the next ones continuing it (index above 0).
	maxMergedText = 16 << 10
)

// foldEv is one event of a fold: its seq, type and payload (only the fields the
// history and the compaction read), and its share of the history budget.
type foldEv struct {
	Seq     int64           `json:"s"`
	Type    string          `json:"t"`
	Payload json.RawMessage `json:"p,omitempty"`
	// W is eventTokens of the events it stands for: itself, the chunks merged into it,
	// and the events dropped since the previous one kept.
	W int64 `json:"w"`
	// L is eventTokens of the newest event merged in (the chunk carrying the model
	// call's usage), when other events were: 0 otherwise (then W is its own).
	L int64 `json:"l,omitempty"`
}

// foldWeight is a held folded event's share of the budget (foldEv's W and L).
type foldWeight struct{ w, l int64 }

// pieceMeta is a fold item as the window knows it.
type pieceMeta struct {
	from, to int64
	at       string // the `at` of its newest event
	expired  bool   // given its TTL by this invocation
}

// foldPiece is one fold item.
type foldPiece struct {
	pieceMeta
	evs []foldEv
}

func foldSK(from int64) string { return foldPrefix + fmt.Sprintf("%020d", from) }

// foldEvents folds evs, ascending and contiguous: the events history and the
// compaction read, each run of chunks of one model output merged, and the last event
// kept whatever its type (a bare mark), so the fold's budget shares add up to the
// events'.
func foldEvents(evs []sessionlog.Event) []foldEv {
	var out []foldEv
	var carry int64 // budget of the events dropped since the last kept
	lastCompacted := -1
	for i, ev := range evs {
		if ev.Type == TypeContextCompacted {
			lastCompacted = i
		}
	}
	merging := -1 // index in out of the chunk further chunks continue; -1: none
	var text strings.Builder
	flush := func() {
		if merging < 0 {
			return
		}
		c := decode[assistantChunk](sessionlog.Event{Payload: out[merging].Payload})
		c.Text = text.String()
		out[merging].Payload, _ = json.Marshal(c)
		merging = -1
		text.Reset()
	}
	for i, ev := range evs {
		t := eventTokens(ev)
		var p any
		keep := true
		switch ev.Type {
		case TypeUserMessage:
			p = userMessage{Text: decode[userMessage](ev).Text}
		case TypeContextInjected:
			p = contextInjected{Text: decode[contextInjected](ev).Text}
		case TypeToolCall:
			c := decode[toolCall](ev)
			p = toolCall{ID: c.ID, Name: c.Name, Args: c.Args, Usage: c.Usage}
		case TypeToolResult:
			r := decode[toolResult](ev)
			p = toolResult{CallID: r.CallID, Result: r.Result, Error: r.Error}
		case TypeContextCompacted:
			if i == lastCompacted {
				p = decode[contextCompacted](ev)
			}
		case TypeAssistantChunk:
			c := decode[assistantChunk](ev)
			if merging >= 0 && c.Index > 0 && text.Len() < maxMergedText {
				m := &out[merging]
				text.WriteString(c.Text)
				mc := decode[assistantChunk](sessionlog.Event{Payload: m.Payload})
				mc.Final, mc.Usage = c.Final, c.Usage
				m.Payload, _ = json.Marshal(assistantChunk{Index: mc.Index, Final: mc.Final, Usage: mc.Usage})
				m.Seq, m.W, m.L = ev.Seq, m.W+carry+t, t // the usage, if any, is this chunk's
				carry = 0
				if c.Final {
					flush()
				}
				continue
			}
			flush()
			text.WriteString(c.Text)
			p = assistantChunk{Index: c.Index, Final: c.Final, Usage: c.Usage}
			out = append(out, foldEv{Seq: ev.Seq, Type: ev.Type, W: carry + t, L: own(carry, t)})
			out[len(out)-1].Payload, _ = json.Marshal(p)
			carry = 0
			if c.Final {
				merging = len(out) - 1
				flush()
			} else {
				merging = len(out) - 1
			}
			continue
		case TypeTurnStart, TypeTurnEnd:
		default:
			keep = i == len(evs)-1
		}
		if !keep {
			carry += t
			continue
		}
		flush()
		fe := foldEv{Seq: ev.Seq, Type: ev.Type, W: carry + t, L: own(carry, t)}
		if p != nil {
			fe.Payload, _ = json.Marshal(p)
		}
		out = append(out, fe)
		carry = 0
	}
	flush()
	return out
}

// own is foldEv.L of an event of t tokens kept after carry dropped ones.
func own(carry, t int64) int64 {
	if carry > 0 {
		return t
	}
	return 0
}

// piecesOf cuts the fold fevs of the events from..to into items of at most
// maxPieceBytes of events each; at is the newest event's time.
func piecesOf(from, to int64, at string, fevs []foldEv) []foldPiece {
	var out []foldPiece
	cur := foldPiece{pieceMeta: pieceMeta{from: from, to: to, at: at}}
	size := 0
	for _, fe := range fevs {
		n := len(fe.Payload) + len(fe.Type) + 32
		if size > 0 && size+n > maxPieceBytes {
			cur.to = cur.evs[len(cur.evs)-1].Seq
			out = append(out, cur)
			cur = foldPiece{pieceMeta: pieceMeta{from: cur.to + 1, to: to, at: at}}
			size = 0
		}
		cur.evs = append(cur.evs, fe)
		size += n
	}
	return append(out, cur)
}

// events turns a fold back into log events, for history() and the compaction; w
// receives each one's share of the budget.
func (p foldPiece) events(w map[int64]foldWeight) []sessionlog.Event {
	out := make([]sessionlog.Event, len(p.evs))
	for i, fe := range p.evs {
		out[i] = sessionlog.Event{Seq: fe.Seq, Type: fe.Type, Payload: fe.Payload}
		if fe.Payload == nil {
			out[i].Payload = json.RawMessage("{}")
		}
		w[fe.Seq] = foldWeight{w: fe.W, l: fe.L}
	}
	return out
}

// putFolds writes fold items. Cost: 1 write unit per KB of each (a plain turn's fold
// is under 1 KB).
func (st *store) putFolds(ctx context.Context, agentID string, pieces []foldPiece) error {
	for _, p := range pieces {
		h, err := json.Marshal(p.evs)
		if err != nil {
			return fmt.Errorf("agent: encode fold %d of %s: %w", p.from, agentID, err)
		}
		item := key(agentID, foldSK(p.from))
		item["to"], item["at"], item["h"] = n(p.to), s(p.at), &types.AttributeValueMemberB{Value: h}
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.table), Item: item}); err != nil {
			return fmt.Errorf("agent: write fold %d of %s: %w", p.from, agentID, err)
		}
	}
	return nil
}

// readFolds reads the fold items that cover seqs keyFrom..below-1, newest first, and
// returns them ascending, chained (each ends where the next begins: an item an older
// write left behind, overlapping, is skipped). ok is false when the chain does not
// reach keyFrom. Cost: one strongly consistent Query, 1 read unit per 4 KB of items
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
func (st *store) readFolds(ctx context.Context, agentID string, keyFrom, below int64) ([]foldPiece, bool, error) {
	var got []foldPiece
	want := below - 1 // the to of the next piece of the chain
	var start map[string]types.AttributeValue
	for {
		out, err := st.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(st.table),
			KeyConditionExpression: aws.String("pk = :p AND sk BETWEEN :a AND :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":p": s(pk(agentID)), ":a": s(foldSK(keyFrom)), ":b": s(foldSK(below - 1)),
			},
			ScanIndexForward:  aws.Bool(false),
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, false, fmt.Errorf("agent: read folds of %s: %w", agentID, err)
		}
		for _, it := range out.Items {
			p, err := decodeFold(it)
			if err != nil {
				return nil, false, fmt.Errorf("agent: decode fold of %s: %w", agentID, err)
			}
			if p.to != want {
				continue
			}
			got = append(got, p)
			want = p.from - 1
			if p.from <= keyFrom {
				for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
					got[i], got[j] = got[j], got[i]
				}
				return got, true, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil, false, nil
		}
		start = out.LastEvaluatedKey
	}
}

func decodeFold(it map[string]types.AttributeValue) (foldPiece, error) {
	var p foldPiece
	sk, _ := it["sk"].(*types.AttributeValueMemberS)
	to, _ := it["to"].(*types.AttributeValueMemberN)
	h, _ := it["h"].(*types.AttributeValueMemberB)
	if sk == nil || to == nil || h == nil {
		return p, fmt.Errorf("fold item without sk, to or h")
	}
	var err error
	if p.from, err = strconv.ParseInt(strings.TrimPrefix(sk.Value, foldPrefix), 10, 64); err != nil {
		return p, err
	}
	if p.to, err = strconv.ParseInt(to.Value, 10, 64); err != nil {
		return p, err
	}
	if at, ok := it["at"].(*types.AttributeValueMemberS); ok {
		p.at = at.Value
	}
	return p, json.Unmarshal(h.Value, &p.evs)
}

// expireFold gives a fold item its TTL (the agents table's expires_at). Cost: 1 write
// unit.
func (st *store) expireFold(ctx context.Context, agentID string, from, at int64) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       key(agentID, foldSK(from)),
		UpdateExpression:          aws.String("SET #e = :e"),
		ConditionExpression:       aws.String("attribute_exists(sk)"),
		ExpressionAttributeNames:  map[string]string{"#e": sessionlog.ExpiresAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": n(at)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("agent: expire fold %d of %s: %w", from, agentID, err)
	}
	return nil
}

// loadHistory reads the history below the window's start that ck's floor says the
// model needs: the fold items from the one holding the floor, or — when the chain is
// broken — the events themselves, folded again.
func (w *logWindow) loadHistory(ctx context.Context, st *store, h *ckHist) error {
	w.weights = map[int64]foldWeight{}
	if h.Floor >= w.start {
		return nil
	}
	pieces, ok, err := st.readFolds(ctx, w.agentID, h.Key, w.start)
	if err != nil {
		return err
	}
	if !ok {
		evs, err := w.log.Read(ctx, w.agentID, h.Floor, int(w.start-h.Floor))
		if err != nil {
			return fmt.Errorf("agent: read log of %s: %w", w.agentID, err)
		}
		if len(evs) == 0 {
			return nil
		}
		pieces = []foldPiece{{pieceMeta: pieceMeta{from: h.Floor, to: w.start - 1, at: evs[len(evs)-1].At}, evs: foldEvents(evs)}}
	}
	for _, p := range pieces {
		w.pieces = append(w.pieces, p.pieceMeta)
		for _, ev := range p.events(w.weights) {
			w.hist = append(w.hist, ev)
			if ev.Type == TypeContextCompacted && len(ev.Payload) > 2 {
				w.compacted = &compaction{seq: ev.Seq, contextCompacted: decode[contextCompacted](ev)}
			}
		}
	}
	return nil
}
