package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
)

// FramesURL returns the URL frames of agentID are posted to over HTTP,
// http(s)://HOST/agents/{agent_id}/frames, from base: anything AgentURL takes that
// names the agent by its path (ws(s)://HOST/agents/{agent_id}/ws, a template, a server
// root, or their http(s) forms). The raw API Gateway URL (wss://API/STAGE?agent_id=ID)
// serves no HTTP path: ErrBadURL.
func FramesURL(base, agentID string) (string, error) {
	sock, err := AgentURL(base, agentID)
	if err != nil {
		return "", err
	}
	u, err := parseSocketURL(sock)
	if err != nil {
		return "", err
	}
	id := agentOf(u)
	if !strings.HasSuffix(u.Path, "/agents/"+id+"/ws") {
		return "", fmt.Errorf("%w: %s: frames over HTTP are posted to the host of the agent's /agents/{agent_id}/ws URL (on AWS the CloudFront URL), not the raw API Gateway stage", ErrBadURL, base)
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "ws")+"frames", ""
	u.RawQuery = ""
	if u.Scheme == "wss" {
		u.Scheme = "https"
	} else {
		u.Scheme = "http"
	}
	return u.String(), nil
}

// SendOptions configure SendFrame. The zero value works.
type SendOptions struct {
	// IdempotencyKey is the frame's client_id, sent as the Idempotency-Key header
	// (1–128 characters). "": a new one (NewClientID), unless the frame holds a
	// client_id of its own.
	IdempotencyKey string
	// HTTPClient sends the request; nil: http.DefaultClient.
	HTTPClient *http.Client
	// Attempts bounds the tries of a request that failed on the way (no answer, or
	// 500 internal): each is sent again with the same key, which the server applies
	// once. 0: 3.
	Attempts int
}

// SendFrame posts one control frame — its JSON exactly as on the socket (inject,
// cancel, approve, deny, set_model, set_policy) — to the agent's HTTP path
// (POST /agents/{agent_id}/frames, docs/protocol.md "HTTP") with token, and returns nil
// once the server accepted it (202). A refusal is a *ProtocolError with the socket's
// code (errors.Is: ErrUnauthorized, ErrBadFrame, ErrNotRunning, …). base and agentID
// are as FramesURL takes them. It returns the client_id the frame was sent with.
func SendFrame(ctx context.Context, base, agentID, token string, frame []byte, o SendOptions) (string, error) {
	u, err := FramesURL(base, agentID)
	if err != nil {
		return "", err
	}
	key := o.IdempotencyKey
	if key == "" {
		var f struct {
			ClientID string `json:"client_id"`
		}
		if json.Unmarshal(frame, &f) == nil && f.ClientID != "" {
			key = f.ClientID
		} else {
			key = NewClientID()
		}
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	attempts := o.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	for attempt := 1; ; attempt++ {
		err = postFrame(ctx, hc, u, token, key, frame)
		var pe *ProtocolError
		retry := err != nil && (!errors.As(err, &pe) || pe.Code == CodeInternal)
		if !retry || attempt >= attempts || ctx.Err() != nil {
			return key, err
		}
		t := time.NewTimer(time.Duration(attempt) * 200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return key, err
		case <-t.C:
		}
	}
}

func postFrame(ctx context.Context, hc *http.Client, u, token, key string, frame []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(frame))
	if err != nil {
		return fmt.Errorf("client: post frame: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(protocol.IdempotencyKeyHeader, key)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: post frame: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("client: post frame: read answer: %w", err)
	}
	if resp.StatusCode == http.StatusAccepted {
		return nil
	}
	var f wireFrame
	if json.Unmarshal(body, &f) == nil && f.Type == protocol.TypeError && f.Code != "" {
		return &ProtocolError{Code: f.Code, Message: f.Message}
	}
	return fmt.Errorf("client: post frame: status %d: %.200s", resp.StatusCode, body)
}
