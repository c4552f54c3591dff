package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
)

// runTail prints an agent's session events as JSON lines, the envelope exactly as the
// server sent it, from --from on, and follows the live tail until interrupted. It
// reconnects through drops (saying so on stderr) and fails on unauthorized, superseded
// and any other error that ends the client.
func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf := addTargetFlags(fs, env)
	from := fs.Int64("from", 0, "first seq to print: replay from it, then follow live")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *from < 0 {
		return fmt.Errorf("%w: --from must be ≥ 0", errUsage)
	}
	tgt, err := tf.resolve(ctx, env)
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, tgt.url, tgt.token, client.Options{
		OnEvent: func(ev client.Event) error {
			line := make([]byte, 0, len(ev.Raw)+1)
			_, err := stdout.Write(append(append(line, ev.Raw...), '\n'))
			return err
		},
		OnNotice: func(n client.Notice) { fmt.Fprintf(stderr, "terret tail: %s\n", describeNotice(n)) },
		OnStatus: func(s client.Status) {
			if line := describeStatus(s); line != "" {
				fmt.Fprintf(stderr, "terret tail: %s\n", line)
			}
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return explainEnd(err, tgt.agent)
	}
	defer c.Close()
	if err := c.Subscribe(ctx, *from); err != nil && ctx.Err() == nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-c.Done():
		return explainEnd(c.Err(), tgt.agent)
	}
}

// endedError is how chat and tail report the server ending their connection for good:
// what happened and what to do, for people; errors.Is still finds the client's error.
type endedError struct {
	msg string
	err error
}

func (e *endedError) Error() string { return e.msg }
func (e *endedError) Unwrap() error { return e.err }

// explainEnd turns superseded and unauthorized into messages that say what happened
// and what to do; other errors (and nil) pass through.
func explainEnd(err error, agent string) error {
	switch {
	case errors.Is(err, client.ErrSuperseded):
		return &endedError{err: err, msg: fmt.Sprintf("superseded: another client connected to agent %s. "+
			"An agent has one connection at a time and the newest wins: terret chat, terret tail and the web page "+
			"on one agent take it from each other. Close the other client (or use another agent id), then run this again", agent)}
	case errors.Is(err, client.ErrUnauthorized):
		return &endedError{err: err, msg: fmt.Sprintf("unauthorized: the token for agent %s is missing, invalid, rotated, revoked or expired. "+
			"Get a new one (terret token create --agent %s), or leave --token out while terret dev runs", agent, agent)}
	}
	return err
}

// targetFlags say which agent socket chat and tail open, and with what token.
type targetFlags struct {
	agent, url, token, addr *string
}

func addTargetFlags(fs *flag.FlagSet, env config.CLIEnv) targetFlags {
	return targetFlags{
		agent: fs.String("agent", "", "agent id (required unless --url names the agent)"),
		url: fs.String("url", env.URL, "the agent's socket URL, ws(s)://HOST/agents/{agent_id}/ws or wss://API/STAGE?agent_id=ID, "+
			"or a base to build it from: ws(s)://HOST, wss://API/STAGE (env TERRET_URL; default: the running terret dev's)"),
		token: fs.String("token", env.Token, "bearer token (env TERRET_TOKEN; default with the running terret dev: a new token for the agent, created in its tables)"),
		addr:  fs.String("addr", "", "the terret dev to use, by its listen address HOST:PORT (needed when several are running)"),
	}
}

type target struct {
	agent, url, token string
}

var errNoDevSocket = errors.New("no running terret dev found: start `terret dev`, or pass --url and --token (env TERRET_URL, TERRET_TOKEN)")

// resolve finds the socket URL and token. Without --url it connects to the running
// `terret dev` (its state file names the URL) and, without --token, creates a token
// for the agent in that dev's tables: a convenience of the local profile only.
func (f targetFlags) resolve(ctx context.Context, env config.CLIEnv) (target, error) {
	base, token := *f.url, *f.token
	var dev devState // the terret dev whose tables mint a missing token
	if base == "" {
		st, err := readDevState(env, *f.addr)
		if err != nil {
			return target{}, err
		}
		base, dev = st.WSURL, st
	} else if token == "" {
		st, err := findDev(env, base, "--url")
		if err != nil {
			return target{}, fmt.Errorf("%w: --token is required with --url (env TERRET_TOKEN)", errUsage)
		}
		dev = st
	}
	u, err := client.AgentURL(base, *f.agent)
	if err != nil {
		if *f.agent == "" {
			return target{}, fmt.Errorf("%w: --agent is required", errUsage)
		}
		return target{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	agent, err := client.AgentID(u)
	if err != nil {
		return target{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if token == "" {
		if token, err = devToken(ctx, dev, agent); err != nil {
			return target{}, fmt.Errorf("create a dev token for %s: %w", agent, err)
		}
	}
	return target{agent: agent, url: u, token: token}, nil
}

// readDevState finds the running `terret dev` (the one at addr, if given).
func readDevState(env config.CLIEnv, addr string) (devState, error) {
	s, err := findDev(env, addr, "--addr or --url")
	if errors.Is(err, errNoDev) {
		return devState{}, errNoDevSocket
	}
	return s, err
}

// devToken creates a token for agent in the tables of dev, as `terret token create`
// does.
func devToken(ctx context.Context, dev devState, agent string) (string, error) {
	st := devStore(dev)
	return auth.New(st.db, st.connections).Create(ctx, agent)
}

// describeStatus is the line for people about a connection change, or "".
func describeStatus(s client.Status) string {
	switch {
	case s.State == client.StateReconnecting && s.Attempt <= 1:
		return fmt.Sprintf("connection lost (%s); reconnecting in %s", why(s.Err), s.Delay.Round(10*time.Millisecond))
	case s.State == client.StateReconnecting:
		return fmt.Sprintf("still disconnected (%s); retrying in %s (attempt %d)", why(s.Err), s.Delay.Round(10*time.Millisecond), s.Attempt)
	case s.State == client.StateConnected && s.Attempt > 0:
		return fmt.Sprintf("reconnected (log at seq %d)", s.Hello.LastSeq)
	}
	return ""
}

// why is an error's text without the client package's prefixes.
func why(err error) string {
	if err == nil {
		return "unknown"
	}
	msg := strings.TrimPrefix(err.Error(), "client: ")
	return strings.TrimPrefix(msg, "connection lost: ")
}

func describeNotice(n client.Notice) string {
	var rt *client.ReplayTruncated
	if errors.As(n, &rt) {
		return fmt.Sprintf("events %d to %d are not replayed (the server's replay limit); continuing from %d", rt.Requested, rt.From-1, rt.From)
	}
	return n.Error()
}
