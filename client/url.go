package client

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// agentIDPattern is the server's rule for agent ids (1–128 of A-Z a-z 0-9 . _ -).
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// placeholder stands for the agent id in URL templates such as the one `terret dev`
// writes to its state file.
const placeholder = "{agent_id}"

// AgentID returns the agent a socket URL names: the {agent_id} of a path ending in
// /agents/{agent_id}/ws (the protocol's URL), else its agent_id query parameter (the
// raw API Gateway URL, wss://API/STAGE?agent_id=ID). It returns ErrBadURL when the URL
// is not ws, wss, http or https, or names no valid agent id.
func AgentID(socketURL string) (string, error) {
	u, err := parseSocketURL(socketURL)
	if err != nil {
		return "", err
	}
	id := agentOf(u)
	if id == "" || !agentIDPattern.MatchString(id) {
		return "", fmt.Errorf("%w: %s names no agent: want ws(s)://HOST/agents/{agent_id}/ws or wss://API/STAGE?agent_id=ID", ErrBadURL, socketURL)
	}
	return id, nil
}

// AgentURL returns the socket URL of agentID built from base, which may be
//   - a template holding {agent_id} (ws://127.0.0.1:3001/agents/{agent_id}/ws);
//   - a server root (ws://HOST or ws://HOST/): agentID's path /agents/{agent_id}/ws is added;
//   - an API Gateway stage URL (wss://API/STAGE): ?agent_id=agentID is added;
//   - an agent's socket URL of either form, which must name agentID itself.
//
// http and https become ws and wss. An empty agentID returns base normalized if it
// names an agent. Errors match ErrBadURL.
func AgentURL(base, agentID string) (string, error) {
	u, err := parseSocketURL(base)
	if err != nil {
		return "", err
	}
	if agentID == "" {
		if _, err := AgentID(u.String()); err != nil {
			return "", err
		}
		return u.String(), nil
	}
	if !agentIDPattern.MatchString(agentID) {
		return "", fmt.Errorf("%w: invalid agent id %q: use 1-128 of A-Z a-z 0-9 . _ -", ErrBadURL, agentID)
	}
	q := u.Query()
	templated := false
	if strings.Contains(u.Path, placeholder) {
		u.Path, u.RawPath = strings.ReplaceAll(u.Path, placeholder, agentID), ""
		templated = true
	}
	if q.Get("agent_id") == placeholder {
		q.Set("agent_id", agentID)
		u.RawQuery = q.Encode()
		templated = true
	}
	switch id := agentOf(u); {
	case templated:
	case id != "" && id != agentID:
		return "", fmt.Errorf("%w: %s names agent %q, not %q", ErrBadURL, base, id, agentID)
	case id != "":
	case u.Path == "" || u.Path == "/":
		u.Path, u.RawPath = "/agents/"+agentID+"/ws", ""
	default:
		q.Set("agent_id", agentID)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

func parseSocketURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "ws", "http":
		u.Scheme = "ws"
	case "wss", "https":
		u.Scheme = "wss"
	default:
		return nil, fmt.Errorf("%w: %q: the scheme must be ws or wss", ErrBadURL, raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %q has no host", ErrBadURL, raw)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// agentOf returns the agent id of u's path (…/agents/ID/ws) or, failing that, of its
// agent_id query parameter; "" when neither names one.
func agentOf(u *url.URL) string {
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if n := len(segs); n >= 3 && segs[n-3] == "agents" && segs[n-1] == "ws" {
		return segs[n-2]
	}
	return u.Query().Get("agent_id")
}
