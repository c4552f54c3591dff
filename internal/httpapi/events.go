package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The log over HTTP: GET /agents/{agent_id}/events (docs/protocol.md, "The log over
// HTTP"). A JSON page is what a subscribe from the same seq replays first
// (delivery.Page); with wait, a page with nothing to give waits for the next event;
// with Accept: text/event-stream the answer is a Server-Sent Events stream of hello,
// the replay and the live tail. Any current token of the agent reads.
//
// A waiting reader learns of new events in two ways. In terret dev the log stream
// poller rings the server's Bell for every record, and the reader reads at once. On
// AWS nothing rings it: the reader peeks at the log's tip (one strongly consistent
// read of one item, 1 read unit) with a growing pause — FirstPeek, doubled up to
// MaxPeek, back to FirstPeek after each event found — so a 20 s long-poll costs at
// most 8 reads and an idle stream one read per MaxPeek, never one a second
// (docs/architecture.md, "The log over HTTP"; docs/cost.md).

// Reader is the part of delivery's Deliverer the events path reads through.
type Reader interface {
	Page(ctx context.Context, agentID string, fromSeq int64, limit int) (delivery.Page, error)
	Tip(ctx context.Context, agentID string) (int64, error)
	Hello(ctx context.Context, agentID string) ([]byte, error)
	Read(ctx context.Context, agentID string, from int64, limit int) ([]sessionlog.Event, error)
}

var _ Reader = (*delivery.Deliverer)(nil)

// Bounds of the events path.
const (
	// MaxWait bounds a long-poll's wait parameter, in seconds (the contract's 20 s,
	// under CloudFront's 30 s origin response timeout).
	MaxWait = 20
	// DefaultPing is how often an idle Server-Sent Events stream gets a comment line,
	// the socket's ping interval: it keeps CloudFront (30 s without a byte ends the
	// response) and proxies from closing it.
	DefaultPing = 20 * time.Second
	// FirstPeek and MaxPeek are the pauses of a waiting reader's peeks at the tip.
	FirstPeek = 250 * time.Millisecond
	MaxPeek   = 4 * time.Second
	// StreamMargin is how long before its invocation's deadline a stream ends, so
	// that it ends cleanly and the client resumes with Last-Event-ID (Lambda's 15
	// minutes).
	StreamMargin = 2 * time.Second
)

// Events serves GET /agents/{agent_id}/events.
type Events struct {
	Log         Reader
	ReplayLimit int           // limit's default and cap
	Ping        time.Duration // default DefaultPing
	FirstPeek   time.Duration // default FirstPeek
	MaxPeek     time.Duration // default MaxPeek
}

// EventsPage is the JSON answer of the events path.
type EventsPage struct {
	Epoch           string                    `json:"epoch"`
	Events          []json.RawMessage         `json:"events"`
	NextSeq         int64                     `json:"next_seq"`
	LastSeq         int64                     `json:"last_seq"`
	ReplayTruncated *protocol.ReplayTruncated `json:"replay_truncated,omitempty"`
}

// Route adds the events path to s.
func (e Events) Route(s *Server) {
	if e.Ping <= 0 {
		e.Ping = DefaultPing
	}
	if e.FirstPeek <= 0 {
		e.FirstPeek = FirstPeek
	}
	if e.MaxPeek <= 0 {
		e.MaxPeek = MaxPeek
	}
	s.Route("GET /agents/{agent_id}/events", func(w http.ResponseWriter, r *http.Request, c Caller) {
		q, err := e.parse(r)
		if err != nil {
			WriteError(w, protocol.CodeBadFrame, err.Error())
			return
		}
		if q.stream {
			e.stream(w, r, s, c, q)
			return
		}
		e.page(w, r, s, c, q)
	})
}

// eventsQuery is a request's parameters.
type eventsQuery struct {
	from   int64
	limit  int
	wait   time.Duration
	stream bool // Accept: text/event-stream
}

// parse reads the query; an error names the parameter or header at fault.
func (e Events) parse(r *http.Request) (eventsQuery, error) {
	var q eventsQuery
	q.stream = AcceptsEventStream(r.Header.Get("Accept"))
	v := r.URL.Query()
	from, hasFrom := v.Get("from_seq"), v.Has("from_seq")
	if id := r.Header.Get("Last-Event-ID"); q.stream && id != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(id), 10, 64)
		if err != nil || n < 0 {
			return q, fmt.Errorf("Last-Event-ID: want the seq of the last event received, got %q", id)
		}
		q.from, hasFrom, from = n+1, false, ""
	} else if !hasFrom {
		return q, errors.New("from_seq: required (the first seq wanted, 0 for the whole log)")
	}
	if hasFrom {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 0 {
			return q, fmt.Errorf("from_seq: want an integer ≥ 0, got %q", from)
		}
		q.from = n
	}
	q.limit = e.ReplayLimit
	if v.Has("limit") {
		n, err := strconv.Atoi(v.Get("limit"))
		if err != nil || n < 1 {
			return q, fmt.Errorf("limit: want an integer ≥ 1, got %q", v.Get("limit"))
		}
		q.limit = min(n, e.ReplayLimit)
	}
	if v.Has("wait") {
		s, err := strconv.ParseFloat(v.Get("wait"), 64)
		if err != nil || s < 0 || s > MaxWait || s != s {
			return q, fmt.Errorf("wait: want seconds from 0 to %d, got %q", MaxWait, v.Get("wait"))
		}
		q.wait = time.Duration(s * float64(time.Second))
	}
	return q, nil
}

// AcceptsEventStream reports whether an Accept header asks for text/event-stream.
func AcceptsEventStream(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(part, ";")
		if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
			return true
		}
	}
	return false
}

// page answers one JSON page, waiting up to q.wait for an event when there is none.
// A wait that sees the log reset (its tip below the one the empty page read) answers
// at once with a page of the new log, whose epoch tells the reader to start over; one
// that sees it deleted answers unauthorized, as the socket is told.
func (e Events) page(w http.ResponseWriter, r *http.Request, s *Server, c Caller, q eventsQuery) {
	ctx := r.Context()
	agentID := c.AgentID
	rang, stop := s.bell.listen(agentID) // before the read: no ring is missed
	defer stop()
	p, err := e.Log.Page(ctx, agentID, q.from, q.limit)
	if err == nil && len(p.Events) == 0 && q.wait > 0 {
		l := e.peeker(rang)
		var found bool
		found, err = l.until(ctx, time.Now().Add(q.wait), func(ctx context.Context) (bool, error) {
			tip, err := e.Log.Tip(ctx, agentID)
			if errors.Is(err, sessionlog.ErrNotFound) {
				// Deleted (its tokens went first) or being reset: the new log's seq 0
				// comes next, and a peek finds it below the old tip.
				if s.revoked(ctx, r, agentID) {
					return false, errRevoked
				}
				return false, nil
			}
			return tip >= p.From || tip < p.Last, err
		})
		if errors.Is(err, errRevoked) {
			WriteError(w, protocol.CodeUnauthorized, protocol.Refusal(protocol.CodeUnauthorized).Message)
			return
		}
		if found {
			first := p.Truncated
			p, err = e.Log.Page(ctx, agentID, p.From, q.limit)
			if p.Truncated == nil {
				p.Truncated = first
			} else {
				p.Truncated.RequestedFromSeq = q.from
			}
		}
	}
	if err != nil {
		e.fail(w, r, s, agentID, err)
		return
	}
	out := EventsPage{Epoch: p.Epoch, Events: make([]json.RawMessage, 0, len(p.Events)), NextSeq: p.Next, LastSeq: max(p.Last, p.Next-1), ReplayTruncated: p.Truncated}
	for _, ev := range p.Events {
		b, err := ev.MarshalJSON()
		if err != nil {
			e.fail(w, r, s, agentID, err)
			return
		}
		out.Events = append(out.Events, b)
	}
	WriteJSON(w, http.StatusOK, out)
}

// fail answers an error of the log's read.
func (e Events) fail(w http.ResponseWriter, r *http.Request, s *Server, agentID string, err error) {
	if errors.Is(err, sessionlog.ErrNotFound) {
		WriteError(w, protocol.CodeNotRunning, "the agent has no log")
		return
	}
	if r.Context().Err() != nil {
		return // the client left
	}
	s.log.ErrorContext(r.Context(), "read the log over HTTP", "agent_id", agentID, "error", err)
	WriteError(w, protocol.CodeInternal, "internal error")
}

// stream answers Server-Sent Events: hello (naming the token's role, as the socket's
// does), the replay from q.from, then the live tail, until the client leaves, the
// invocation's deadline nears, or the log the hello named is gone: a reset or a delete
// ends the stream with the error frame a socket gets (endedLog).
func (e Events) stream(w http.ResponseWriter, r *http.Request, s *Server, c Caller, q eventsQuery) {
	ctx := r.Context()
	agentID := c.AgentID
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-StreamMargin))
		defer cancel()
	}
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	rang, stop := s.bell.listen(agentID)
	defer stop()
	raw, err := e.Log.Hello(ctx, agentID)
	var hello protocol.Hello
	if err == nil {
		err = json.Unmarshal(raw, &hello)
	}
	if err != nil {
		e.fail(w, r, s, agentID, err)
		return
	}
	hello = hello.WithRole(helloRole(c.Role))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// retry: a browser's EventSource reconnects after 1 s, with Last-Event-ID.
	if _, err := fmt.Fprintf(w, "retry: 1000\nevent: hello\ndata: %s\n\n", protocol.Marshal(hello)); err != nil {
		return
	}
	flush()
	l := e.peeker(rang)
	// The replay: pages as a subscribe replays them, each read under a replay slot,
	// until one comes back short of the limit.
	next, requested := q.from, q.from
	for {
		p, err := e.Log.Page(ctx, agentID, next, e.ReplayLimit)
		if errors.Is(err, sessionlog.ErrNotFound) || err == nil && otherEpoch(hello.Epoch, p.Epoch) {
			e.endedLog(w, r, s, agentID, flush)
			return
		}
		if err != nil {
			e.streamFailed(ctx, s, agentID, err)
			return
		}
		var b strings.Builder
		if p.Truncated != nil {
			t := *p.Truncated
			t.RequestedFromSeq = requested
			fmt.Fprintf(&b, "event: replay_truncated\ndata: %s\n\n", protocol.Marshal(t))
		}
		if !writeEvents(w, &b, p.Events, flush) {
			return
		}
		next, requested = p.Next, p.Next
		if len(p.Events) < e.ReplayLimit {
			break
		}
	}
	// The live tail: each peek reads the tip, and from next when the tip is there (a
	// tail read takes no replay slot, as a connection's tail does not); a comment line
	// when a ping interval passes with nothing. A peek that finds the log gone or its
	// tip below what was sent, or events of another epoch, found a reset or a delete.
	var tail []sessionlog.Event
	peek := func(ctx context.Context) (bool, error) {
		tip, err := e.Log.Tip(ctx, agentID)
		switch {
		case errors.Is(err, sessionlog.ErrNotFound):
			return false, errLogEnded
		case err != nil:
			return false, err
		case tip < next-1:
			return false, errLogEnded
		case tip < next:
			return false, nil
		}
		tail, err = e.Log.Read(ctx, agentID, next, e.ReplayLimit)
		for _, ev := range tail {
			if otherEpoch(hello.Epoch, ev.Epoch) {
				return false, errLogEnded
			}
		}
		return len(tail) > 0, err
	}
	// The token is checked again once per ping interval (1 read unit): a rotation or
	// revocation that drops it ends the stream with unauthorized, as it closes a socket.
	checked := time.Now()
	for {
		found, err := l.until(ctx, time.Now().Add(e.Ping), peek)
		if errors.Is(err, errLogEnded) {
			e.endedLog(w, r, s, agentID, flush)
			return
		}
		if err != nil {
			e.streamFailed(ctx, s, agentID, err)
			return
		}
		if time.Since(checked) >= e.Ping {
			checked = time.Now()
			if s.revoked(ctx, r, agentID) {
				s.log.InfoContext(ctx, "log over HTTP: the stream's token was revoked", "agent_id", agentID)
				writeErrorEvent(w, protocol.Refusal(protocol.CodeUnauthorized), flush)
				return
			}
		}
		if !found {
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			flush()
			continue
		}
		if !writeEvents(w, &strings.Builder{}, tail, flush) {
			return
		}
		next = tail[len(tail)-1].Seq + 1
		l.reset()
	}
}

// errLogEnded: a stream's peek found the log its hello named gone (reset or deleted).
// errRevoked: a long-poll's peek found the agent's log gone with the caller's token.
var (
	errLogEnded = errors.New("httpapi: the log was reset or deleted")
	errRevoked  = errors.New("httpapi: the token was revoked")
)

// otherEpoch reports whether an epoch read now is not the stream's (an item from
// before epochs were recorded names none, and is taken as the stream's).
func otherEpoch(stream, now string) bool { return stream != "" && now != "" && now != stream }

// helloRole is the hello's role for a token's role (auth.RoleDriver, RoleObserver).
func helloRole(tokenRole string) string {
	if tokenRole == auth.RoleObserver {
		return protocol.RoleObserver
	}
	return protocol.RoleDriver
}

// endedLog ends a stream whose log was reset or deleted as the socket's connection
// is ended (docs/protocol.md, "The log's epoch"): an "error" event with the error
// frame the socket gets — unauthorized when the caller's token is gone with the
// deleted session, else internal with delivery.ResetMessage, after which the reader
// reconnects and finds the new epoch in hello.
func (e Events) endedLog(w http.ResponseWriter, r *http.Request, s *Server, agentID string, flush func()) {
	ctx := r.Context()
	frame := protocol.NewError(protocol.CodeInternal, delivery.ResetMessage)
	if s.revoked(ctx, r, agentID) {
		frame = protocol.Refusal(protocol.CodeUnauthorized)
	}
	if ctx.Err() != nil {
		return
	}
	s.log.InfoContext(ctx, "log over HTTP: the stream's log was reset or deleted", "agent_id", agentID, "code", string(frame.Code))
	writeErrorEvent(w, frame, flush)
}

// writeErrorEvent writes the error frame that ends a stream as an "error" event.
func writeErrorEvent(w http.ResponseWriter, frame protocol.Error, flush func()) {
	if _, err := fmt.Fprintf(w, "event: error\ndata: %s\n\n", protocol.Marshal(frame)); err == nil {
		flush()
	}
}

// revoked reports whether r's bearer token is no longer a token of agentID (a delete
// removes the session's tokens before its log). Cost: the token check's read.
func (s *Server) revoked(ctx context.Context, r *http.Request, agentID string) bool {
	_, _, err := s.tokens.CheckRole(ctx, agentID, auth.BearerToken(r.Header.Get("Authorization")))
	return errors.Is(err, auth.ErrUnauthorized)
}

// writeEvents writes b, then evs as Server-Sent Events (id: seq, data: the envelope),
// and flushes; it reports false when the client is gone.
func writeEvents(w http.ResponseWriter, b *strings.Builder, evs []sessionlog.Event, flush func()) bool {
	for _, ev := range evs {
		env, err := ev.MarshalJSON()
		if err != nil {
			return false
		}
		fmt.Fprintf(b, "id: %d\ndata: %s\n\n", ev.Seq, env)
	}
	if b.Len() == 0 {
		return true
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return false
	}
	flush()
	return true
}

// streamFailed logs an error that ends a stream, unless the client left or the
// deadline came.
func (e Events) streamFailed(ctx context.Context, s *Server, agentID string, err error) {
	if ctx.Err() == nil {
		s.log.ErrorContext(ctx, "stream the log over HTTP", "agent_id", agentID, "error", err)
	}
}

// peeker is a waiting reader's peeks at one agent's tip: at each ring of the bell,
// and otherwise after a pause that doubles from first to most.
type peeker struct {
	rang        <-chan struct{}
	first, most time.Duration
	pause       time.Duration
}

func (e Events) peeker(rang <-chan struct{}) *peeker {
	return &peeker{rang: rang, first: e.FirstPeek, most: e.MaxPeek, pause: e.FirstPeek}
}

// reset starts the pauses over, after an event was found.
func (l *peeker) reset() { l.pause = l.first }

// until peeks (peek) at each ring and after each pause until a peek finds something,
// deadline passes or ctx ends: it reports whether a peek found something.
func (l *peeker) until(ctx context.Context, deadline time.Time, peek func(context.Context) (bool, error)) (bool, error) {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(min(l.pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-l.rang:
		case <-t.C:
			l.pause = min(2*l.pause, l.most)
		}
		t.Stop()
		if found, err := peek(ctx); err != nil || found {
			return found, err
		}
	}
}
