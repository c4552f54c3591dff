package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/termtext"
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
	dialTimeout := addDialTimeout(fs)
	observe := fs.Bool("observe", false, "connect as an observer: beside the agent's driver (terret chat, the web page) instead of taking its connection; "+
		"with the running terret dev and no --token, takes a new observer token (else pass one: terret token create --role observer)")
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
	if *dialTimeout <= 0 {
		return fmt.Errorf("%w: --dial-timeout must be > 0", errUsage)
	}
	tf.observe = *observe
	tgt, err := tf.resolve(ctx, env)
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, tgt.url, tgt.token, client.Options{
		DialTimeout: *dialTimeout,
		OnEvent: func(ev client.Event) error {
			// The event as sent, with any DEL, C1 control or override its strings hold
			// raw escaped as JSON escapes them (termtext): still the same JSON.
			_, err := io.WriteString(stdout, termtext.Text(string(ev.Raw))+"\n")
			return err
		},
		OnNotice: func(n client.Notice) { fmt.Fprintf(stderr, "terret tail: %s\n", termtext.Line(describeNotice(n))) },
		OnStatus: func(s client.Status) {
			if line := describeStatus(s); line != "" {
				fmt.Fprintf(stderr, "terret tail: %s\n", termtext.Line(line))
			}
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return explainEnd(err, tgt)
	}
	defer c.Close()
	if err := c.Subscribe(ctx, *from); err != nil && ctx.Err() == nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-c.Done():
		return explainEnd(c.Err(), tgt)
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
func explainEnd(err error, tgt target) error {
	agent := tgt.agent
	switch {
	case errors.Is(err, client.ErrUnauthorized) && tgt.devToken:
		// No --token: this run took a dev token, which a rotation, revocation or
		// session delete since has dropped; the next run takes a fresh one.
		return &endedError{err: err, msg: fmt.Sprintf("unauthorized: agent %s's tokens were rotated or revoked (or its session deleted) since this "+
			"connected, which ended it. Run this again: without --token it takes a fresh dev token", agent)}
	case errors.Is(err, client.ErrSuperseded):
		return &endedError{err: err, msg: fmt.Sprintf("superseded: another client connected to agent %s. "+
			"An agent has one connection at a time and the newest wins: terret chat, terret tail and the web page "+
			"on one agent take it from each other. Close the other client (or use another agent id), then run this again", agent)}
	case errors.Is(err, client.ErrUnauthorized):
		return &endedError{err: err, msg: fmt.Sprintf("unauthorized: the token for agent %s is missing, invalid, rotated, revoked or expired. "+
			"Get a new one (%s token create --agent %s), or leave --token out while terret dev runs", agent, invokedAs(), agent)}
	}
	return err
}

// addDialTimeout adds --dial-timeout, the bound on one connection attempt of chat and
// tail: its handshake (the gateway's $connect) and hello.
func addDialTimeout(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("dial-timeout", 15*time.Second, "how long one connection attempt may take, handshake and hello (a slow network or gateway: raise it)")
}

// targetFlags say which agent socket chat and tail open, and with what token.
type targetFlags struct {
	agent, url, token, tokenFile, addr *string
	observe                            bool // a token made for the run is an observer's
}

func addTargetFlags(fs *flag.FlagSet, env config.CLIEnv) targetFlags {
	return targetFlags{
		agent: fs.String("agent", "", "agent id (required unless --url names the agent)"),
		url: fs.String("url", env.URL, "the agent's socket URL, ws(s)://HOST/agents/{agent_id}/ws or wss://API/STAGE?agent_id=ID, "+
			"or a base to build it from: ws(s)://HOST, wss://API/STAGE (env TERRET_URL; default: the running terret dev's)"),
		// The default is never env.Token: -h prints a flag's default.
		token: fs.String("token", "", "bearer token; visible to other users in ps: prefer env TERRET_TOKEN or --token-file "+
			"(default with the running terret dev: a new token for the agent, created in its tables)"),
		tokenFile: fs.String("token-file", "", "read the bearer token from this file (its first line; not with --token)"),
		addr:      fs.String("addr", "", "the terret dev to use, by its listen address HOST:PORT (needed when several are running)"),
	}
}

type target struct {
	agent, url, token string
	devToken          bool // token was created for this run in the running terret dev's tables
}

var errNoDevSocket = errors.New("no running terret dev found: start `terret dev`, or pass --url and --token (env TERRET_URL, TERRET_TOKEN)")

// resolve finds the socket URL and token. Without --url it connects to the running
// `terret dev` (its state file names the URL) and, without --token, creates a token
// for the agent in that dev's tables: a convenience of the local profile only.
func (f targetFlags) resolve(ctx context.Context, env config.CLIEnv) (target, error) {
	token, err := f.bearer(env)
	if err != nil {
		return target{}, err
	}
	base := *f.url
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
			return target{}, fmt.Errorf("%w: --token is required with --url (env TERRET_TOKEN, or --token-file)", errUsage)
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
	minted := token == ""
	if minted {
		role := auth.RoleDriver
		if f.observe {
			role = auth.RoleObserver
		}
		if token, err = devToken(ctx, dev, agent, role); err != nil {
			return target{}, fmt.Errorf("create a dev token for %s: %w", agent, err)
		}
	}
	return target{agent: agent, url: u, token: token, devToken: minted}, nil
}

// errEmptyTokenFile is a --token-file with no token in it.
var errEmptyTokenFile = errors.New("holds no token")

// bearer is the token the flags and the environment name, "" for none: --token, else
// --token-file's first line, else TERRET_TOKEN. The two flags together are a usage error.
func (f targetFlags) bearer(env config.CLIEnv) (string, error) {
	switch {
	case *f.token != "" && *f.tokenFile != "":
		return "", fmt.Errorf("%w: --token and --token-file are exclusive", errUsage)
	case *f.token != "":
		return *f.token, nil
	case *f.tokenFile != "":
		b, err := os.ReadFile(*f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if line = strings.TrimSpace(line); line == "" {
			return "", fmt.Errorf("--token-file %s: %w", *f.tokenFile, errEmptyTokenFile)
		}
		return line, nil
	}
	return env.Token, nil
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
func devToken(ctx context.Context, dev devState, agent, role string) (string, error) {
	st := devStore(dev)
	return auth.New(st.db, st.connections).CreateRole(ctx, agent, 0, role)
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
