package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/terret/terret-ws/internal/protocol"
)

// EventsPage is one page of an agent's log read over HTTP (GET /agents/{agent_id}/events,
// docs/protocol.md, "The log over HTTP"): the events from the requested seq on, gapless,
// each exactly the envelope a subscribe delivers.
type EventsPage struct {
	Epoch  string            `json:"epoch"`
	Events []json.RawMessage `json:"events"`
	// NextSeq is the from_seq of the next page; LastSeq the log's tip when read. The
	// log is read to its tip once NextSeq > LastSeq.
	NextSeq int64 `json:"next_seq"`
	LastSeq int64 `json:"last_seq"`
	// ReplayTruncated is set when the replay limit, retention or the tip moved the
	// start, as a subscribe's replay_truncated would say it.
	ReplayTruncated *protocol.ReplayTruncated `json:"replay_truncated,omitempty"`
}

// EventsURL returns the events path of the agent a socket URL names, on the same host:
// ws(s)://HOST/agents/{agent_id}/ws becomes http(s)://HOST/agents/{agent_id}/events.
// The raw API Gateway form (wss://API/STAGE?agent_id=ID) serves no HTTP paths: ErrBadURL.
func EventsURL(socketURL string) (string, error) {
	id, err := AgentID(socketURL)
	if err != nil {
		return "", err
	}
	u, err := parseSocketURL(socketURL)
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(u.Path, "/agents/"+id+"/ws") {
		return "", fmt.Errorf("%w: %s: the log over HTTP is served beside /agents/{agent_id}/ws (CloudFront or terret dev), not on the raw API Gateway URL", ErrBadURL, socketURL)
	}
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	case "ws":
		u.Scheme = "http"
	}
	u.Path, u.RawPath, u.RawQuery = strings.TrimSuffix(u.Path, "ws")+"events", "", ""
	return u.String(), nil
}

// ReadEvents reads one page of the log at eventsURL (EventsURL) from seq from, with
// token: at most limit events (0: the server's replay limit). An error answer is a
// *ProtocolError carrying the server's error frame.
func ReadEvents(ctx context.Context, hc *http.Client, eventsURL, token string, from int64, limit int) (EventsPage, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	q := url.Values{"from_seq": {strconv.FormatInt(from, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, eventsURL+"?"+q.Encode(), nil)
	if err != nil {
		return EventsPage{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return EventsPage{}, fmt.Errorf("client: read events from %d: %w", from, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return EventsPage{}, fmt.Errorf("client: read events from %d: %w", from, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e protocol.Error
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			return EventsPage{}, &ProtocolError{Code: Code(e.Code), Message: e.Message}
		}
		return EventsPage{}, fmt.Errorf("client: read events from %d: status %d", from, resp.StatusCode)
	}
	var p EventsPage
	if err := json.Unmarshal(b, &p); err != nil {
		return EventsPage{}, fmt.Errorf("client: read events from %d: %w", from, err)
	}
	return p, nil
}

// Events reads one page of the client's agent's log over HTTP from seq from, on the
// socket's host with the client's token, without touching the socket or its cursor:
// page on with NextSeq until it passes LastSeq.
func (c *Client) Events(ctx context.Context, from int64) (EventsPage, error) {
	u, err := EventsURL(c.url)
	if err != nil {
		return EventsPage{}, err
	}
	return ReadEvents(ctx, c.opts.HTTPClient, u, c.token, from, 0)
}
