package client_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/terret/terret-ws/client"
)

func clientIDOf(t *testing.T, ev client.Event) string {
	t.Helper()
	var p struct {
		ClientID string `json:"client_id"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatalf("payload of %s: %v", ev.Raw, err)
	}
	return p.ClientID
}

// TestResendAfterReconnect: an inject written to a socket that died before the server
// got it is sent again, with its client_id, on the next connection, and starts its
// turn then; one the server did get before the drop is sent again too and appends
// nothing. The log is the acknowledgement: an inject's event takes it off Pending.
func TestResendAfterReconnect(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	p := startProxy(t, s)
	r := newRecorder()
	c := dial(t, p.url(agent), s.token(t, agent), r.options())
	ctx := ctxT(t)
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	r.until(t, "session/created")

	// Lost: the gateway never gets the frame.
	p.swallow.Store(true)
	if err := c.Inject(ctx, "lost", true); err != nil {
		t.Fatal(err)
	}
	pending := c.Pending()
	if len(pending) != 1 || !strings.HasPrefix(pending[0], "c-") {
		t.Fatalf("pending %v after one inject, want its client_id", pending)
	}
	p.cut()
	p.swallow.Store(false)
	p.restore()
	um := r.until(t, "user/message")
	if payloadText(t, um) != "lost" || clientIDOf(t, um) != pending[0] {
		t.Fatalf("user/message %s, want text lost with client_id %s", um.Raw, pending[0])
	}
	r.until(t, "turn/end")
	if got := c.Pending(); len(got) != 0 {
		t.Fatalf("pending %v after the inject's event, want none", got)
	}

	// Landed (or not: the cut races the frame): applied once either way.
	if err := c.Inject(ctx, "landed", true); err != nil {
		t.Fatal(err)
	}
	p.cut()
	p.restore()
	if err := c.Inject(ctx, "after", true); err != nil {
		// Written to the cut socket before the client saw it die: kept all the same,
		// and sent again after the reconnect.
		t.Logf("inject after: %v", err)
	}
	var texts []string
	for {
		ev := r.next(t, wait())
		if ev.Type == "user/message" || ev.Type == "context/injected" {
			texts = append(texts, payloadText(t, ev))
		}
		if ev.Type == "turn/end" && len(texts) > 0 && texts[len(texts)-1] == "after" {
			break
		}
		if ev.Type == "turn/end" && len(texts) >= 2 && texts[len(texts)-2] == "after" {
			break
		}
	}
	if strings.Join(texts, ",") != "landed,after" {
		t.Fatalf("inject events %q, want landed once, then after", texts)
	}
	r.checkExactlyOnce(t)
}

// TestSendFrame: a frame posted over HTTP is accepted (202), a repeat with its key
// appends nothing, and a refusal is the socket's code as a *ProtocolError.
func TestSendFrame(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	r := newRecorder()
	c := dial(t, s.url(agent), tok, r.options())
	ctx := ctxT(t)
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	r.until(t, "session/created")
	frame := []byte(`{"type":"inject","text":"over http","wake":true}`)
	for range 2 {
		id, err := client.SendFrame(ctx, s.url(agent), agent, tok, frame, client.SendOptions{IdempotencyKey: "k-1"})
		if err != nil || id != "k-1" {
			t.Fatalf("SendFrame = %q, %v; want k-1 accepted", id, err)
		}
	}
	if _, err := client.SendFrame(ctx, s.url(agent), agent, tok, []byte(`{"type":"inject","text":"second","wake":true}`), client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for len(texts) < 2 {
		ev := r.next(t, wait())
		if ev.Type == "user/message" || ev.Type == "context/injected" {
			texts = append(texts, payloadText(t, ev))
			if len(texts) == 1 && clientIDOf(t, ev) != "k-1" {
				t.Fatalf("event %s, want client_id k-1", ev.Raw)
			}
		}
	}
	if strings.Join(texts, ",") != "over http,second" {
		t.Fatalf("inject events %q, want the keyed one once", texts)
	}
	_, err := client.SendFrame(ctx, s.url(agent), agent, "tt_nope", frame, client.SendOptions{})
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("SendFrame with a bad token: %v, want ErrUnauthorized", err)
	}
	_, err = client.SendFrame(ctx, s.url(agent), agent, tok, []byte(`{"type":"subscribe","from_seq":0}`), client.SendOptions{})
	var pe *client.ProtocolError
	if !errors.As(err, &pe) || pe.Code != client.CodeBadFrame {
		t.Fatalf("SendFrame of subscribe: %v, want bad_frame", err)
	}
}

func TestFramesURL(t *testing.T) {
	for _, tt := range []struct{ base, agent, want string }{
		{"ws://127.0.0.1:3001/agents/{agent_id}/ws", "a1", "http://127.0.0.1:3001/agents/a1/frames"},
		{"wss://d111.cloudfront.net", "a1", "https://d111.cloudfront.net/agents/a1/frames"},
		{"https://d111.cloudfront.net/agents/a1/ws", "", "https://d111.cloudfront.net/agents/a1/frames"},
		{"wss://api.execute-api.eu-west-1.amazonaws.com/prod", "a1", ""},
	} {
		got, err := client.FramesURL(tt.base, tt.agent)
		if tt.want == "" {
			if !errors.Is(err, client.ErrBadURL) {
				t.Errorf("FramesURL(%s) = %s, %v; want ErrBadURL", tt.base, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("FramesURL(%s, %s) = %s, %v; want %s", tt.base, tt.agent, got, err, tt.want)
		}
	}
}
