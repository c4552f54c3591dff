package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
)

// smokeScript is the turn the smoke test runs: one echo tool call, then a reply. It
// needs the scripted model and the echo tool, the deployment's defaults.
const (
	smokeReply  = "smoke ok"
	smokeScript = `{"script":[{"call":[{"tool":"echo","args":{"text":"smoke"}}]},{"say":"` + smokeReply + `"}]}`
)

// runSmoke checks a deployment end to end, through the protocol only: connect,
// subscribe, a keepalive, a turn with a tool call, reconnect and replay; then, each when
// asked, a turn on a named model (--model), a quiet socket held open (--idle), a token
// rotation the live socket is refused for (--rotate), and the stage's route throttles as
// deployed (--throttles). Each step prints its name, ok and its latency; the first
// failure ends the run with exit status 1 naming the step.
// Against AWS this is the one test of the IAM grants (DynamoDB Local enforces none):
// the connect transaction (tokens#, agent#, conn# items), the runner's log writes and
// deliver's posts all run under the functions' own roles.
func runSmoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret smoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret smoke [--url URL --token TOKEN] [--agent ID]")
	tf := addTargetFlags(fs, env)
	step := fs.Duration("step-timeout", time.Minute, "how long each step may take")
	listen := fs.Duration("keepalive-wait", 3*time.Second, "how long the keepalive step listens, after its probe's answer, for an error answering the keepalive")
	model := fs.String("model", "", "also run a turn on this model spec (provider/model, e.g. bedrock/eu.anthropic.claude-sonnet-4-20250514-v1:0): set_model main, a plain-text turn, then set_model main back to scripted")
	idle := fs.Duration("idle", 0, "also hold the socket quiet this long (past 10m proves the keepalive keeps it open on AWS and through CloudFront) and check it was never dropped; 0 skips")
	keepaliveEvery := fs.Duration("keepalive-interval", client.DefaultKeepaliveInterval, "how long the client goes without sending before its keepalive (the clients' default)")
	rotate := fs.Bool("rotate", false, "finally rotate the agent's token (the new one is not printed) and check the live socket is answered unauthorized and closed; needs the tables: the running terret dev's, or --connections-table and --region")
	connTable := fs.String("connections-table", "", "with --rotate or --throttles against AWS: the connections table (output ConnectionsTableName)")
	region := fs.String("region", "", "with --rotate or --throttles against AWS: the stack's region (default: the URL's, else the AWS configuration's)")
	throttles := fs.String("throttles", "", "also print the stage's route throttles as deployed: API_ID/STAGE, or \"url\" to read them off an execute-api --url (uses the default AWS credentials, apigateway:GET)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *step <= 0 {
		return fmt.Errorf("%w: --step-timeout must be positive", errUsage)
	}
	if *listen < 0 || *listen >= *step {
		return fmt.Errorf("%w: --keepalive-wait must be at least 0 and less than --step-timeout", errUsage)
	}
	if *idle < 0 {
		return fmt.Errorf("%w: --idle must not be negative (0 skips the step)", errUsage)
	}
	if *keepaliveEvery <= 0 {
		return fmt.Errorf("%w: --keepalive-interval must be positive", errUsage)
	}
	if *idle > 0 && *keepaliveEvery >= *idle {
		return fmt.Errorf("%w: --keepalive-interval %s must be shorter than --idle %s, or the idle step sees no keepalive", errUsage, *keepaliveEvery, *idle)
	}
	if *tf.url == "" && *tf.agent == "" {
		*tf.agent = "smoke-" + randomSuffix() // a fresh agent of the running terret dev
	}
	tgt, err := tf.resolve(ctx, env)
	if err != nil {
		return err
	}
	s := &smoke{url: tgt.url, token: tgt.token, agent: tgt.agent, step: *step, listen: *listen, out: stdout,
		model: *model, idle: *idle, keepaliveEvery: *keepaliveEvery,
		events: make(chan client.Event, 4096), notices: make(chan client.Notice, 64)}
	if *rotate {
		if s.tokens, err = smokeTokens(ctx, env, *connTable, *region, *tf.addr); err != nil {
			return fmt.Errorf("--rotate: %w", err)
		}
	}
	if *throttles != "" {
		if s.stage, err = stageOf(*throttles, tgt.url, *region); err != nil {
			return err
		}
	}
	return s.run(ctx)
}

type smoke struct {
	url, token, agent string
	step              time.Duration
	listen            time.Duration // the keepalive step's wait for an error after its probe's answer
	model             string        // --model: a turn on this spec ("" skips)
	idle              time.Duration // --idle: how long the socket is held quiet (0 skips)
	keepaliveEvery    time.Duration // the client's keepalive interval
	tokens            *auth.Store   // --rotate: the agent's token store (nil skips)
	stage             *stageRef     // --throttles: the stage to read (nil skips)
	out               io.Writer
	events            chan client.Event
	notices           chan client.Notice
	drops             atomic.Int64 // connections lost (Reconnecting statuses) since the start
}

// do runs one step within the step timeout and reports it.
func (s *smoke) do(ctx context.Context, name string, f func(context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.step)
	defer cancel()
	start := time.Now()
	detail, err := f(ctx)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		fmt.Fprintf(s.out, "%-10s FAILED after %s: %v\n", name, took, err)
		return fmt.Errorf("step %s failed: %w", name, err)
	}
	fmt.Fprintf(s.out, "%-10s ok %8s  %s\n", name, took, detail)
	return nil
}

func (s *smoke) dial(ctx context.Context) (*client.Client, error) {
	return client.Dial(ctx, s.url, s.token, client.Options{
		KeepaliveInterval: s.keepaliveEvery,
		OnEvent: func(ev client.Event) error {
			select {
			case s.events <- ev:
				return nil
			default:
				return errors.New("terret smoke: too many events unread")
			}
		},
		OnNotice: func(n client.Notice) {
			select {
			case s.notices <- n:
			default: // more notices than a run provokes: the keepalive step reads the first
			}
		},
		OnStatus: func(st client.Status) {
			if st.State == client.StateReconnecting {
				s.drops.Add(1)
			}
		},
	})
}

// until reads events until match holds for one, and returns it.
func (s *smoke) until(ctx context.Context, c *client.Client, what string, match func(client.Event) (bool, error)) (client.Event, error) {
	for {
		select {
		case ev := <-s.events:
			ok, err := match(ev)
			if err != nil || ok {
				return ev, err
			}
		case <-c.Done():
			return client.Event{}, fmt.Errorf("connection ended before %s: %v", what, c.Err())
		case <-ctx.Done():
			return client.Event{}, fmt.Errorf("no %s: %w", what, ctx.Err())
		}
	}
}

func (s *smoke) run(ctx context.Context) error {
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	var hello client.Hello
	if err := s.do(ctx, "connect", func(ctx context.Context) (string, error) {
		var err error
		if c, err = s.dial(ctx); err != nil {
			return "", err
		}
		hello = c.Hello()
		return fmt.Sprintf("hello: session %s, last_seq %d", hello.SessionID, hello.LastSeq), nil
	}); err != nil {
		return err
	}
	if err := s.do(ctx, "subscribe", func(ctx context.Context) (string, error) {
		if err := c.Subscribe(ctx, hello.LastSeq); err != nil {
			return "", err
		}
		ev, err := s.until(ctx, c, fmt.Sprintf("event %d", hello.LastSeq), func(ev client.Event) (bool, error) { return ev.Seq >= hello.LastSeq, nil })
		return fmt.Sprintf("replayed seq %d (%s)", ev.Seq, ev.Type), err
	}); err != nil {
		return err
	}
	if err := s.do(ctx, "keepalive", func(ctx context.Context) (string, error) {
		return s.keepalive(ctx, c)
	}); err != nil {
		return err
	}
	var turnStart, turnEnd int64 = -1, -1
	if err := s.do(ctx, "turn", func(ctx context.Context) (string, error) {
		if err := c.Inject(ctx, smokeScript, true); err != nil {
			return "", err
		}
		var tool, result bool
		var reply string
		_, err := s.until(ctx, c, "turn/end", func(ev client.Event) (bool, error) {
			var p struct {
				Status, Reason, Text, Name string
				Error                      json.RawMessage
			}
			_ = json.Unmarshal(ev.Payload, &p)
			switch ev.Type {
			case "turn/start":
				if turnStart < 0 {
					turnStart = ev.Seq
				}
			case "tool/call":
				tool = tool || p.Name == "echo"
			case "tool/result":
				if len(p.Error) > 0 && string(p.Error) != "null" {
					return false, fmt.Errorf("tool/result is an error: %s", p.Error)
				}
				result = true
			case "assistant/chunk":
				reply += p.Text
			case "turn/end":
				if turnStart < 0 {
					return false, nil // an earlier turn's end
				}
				turnEnd = ev.Seq
				if p.Status != "completed" {
					return false, fmt.Errorf("turn ended %s: %s", p.Status, p.Reason)
				}
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			return "", err
		}
		if !tool || !result || reply != smokeReply {
			return "", fmt.Errorf("turn completed with tool call %v, tool result %v, reply %q; want echo, its result and %q", tool, result, reply, smokeReply)
		}
		return fmt.Sprintf("seq %d..%d: echo tool call and result, reply %q", turnStart, turnEnd, reply), nil
	}); err != nil {
		return err
	}
	if err := s.do(ctx, "replay", func(ctx context.Context) (string, error) {
		c.Close()
		for len(s.events) > 0 {
			<-s.events // the first connection's leftovers
		}
		var err error
		if c, err = s.dial(ctx); err != nil {
			return "", fmt.Errorf("reconnect: %w", err)
		}
		if err := c.Subscribe(ctx, turnStart); err != nil {
			return "", err
		}
		next := turnStart
		_, err = s.until(ctx, c, fmt.Sprintf("seq %d", turnEnd), func(ev client.Event) (bool, error) {
			if ev.Seq != next {
				return false, fmt.Errorf("replay sent seq %d, want %d", ev.Seq, next)
			}
			next++
			return ev.Seq == turnEnd, nil
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("reconnected, replayed seq %d..%d gapless", turnStart, turnEnd), nil
	}); err != nil {
		return err
	}
	return s.optional(ctx, func() *client.Client { return c })
}

// keepalive proves the deployment's keepalive route (a MOCK integration on AWS, which
// nothing else exercises): it sends {"type":"keepalive"}, then an approve for a call
// that does not exist as a probe, whose answer — stale_call, or unsupported without the
// approvals plugin — shows the socket still open and served. The keepalive must draw no
// error: a server without the route answers it bad_frame, through the same function as
// the probe, so the step listens for that until s.listen after the probe's answer. (The
// route's own answer, {"type":"keepalive"}, is a frame the client ignores; the idle step
// shows what it is for.) No answer can prove a silence for good; the wait bounds the
// check.
func (s *smoke) keepalive(ctx context.Context, c *client.Client) (string, error) {
	for len(s.notices) > 0 {
		<-s.notices
	}
	drops := s.drops.Load()
	if err := c.Keepalive(ctx); err != nil {
		return "", err
	}
	if err := c.Approve(ctx, "smoke-probe-"+randomSuffix()); err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	var answered client.Code // the probe's answer, once it came
	var listen <-chan time.Time
	for {
		select {
		case n := <-s.notices:
			var pe *client.ProtocolError
			if !errors.As(n, &pe) {
				return "", fmt.Errorf("got %v, want nothing but the probe's stale_call", n)
			}
			switch {
			case pe.Code == client.CodeBadFrame && strings.Contains(pe.Message, "keepalive"):
				return "", fmt.Errorf("the keepalive was answered %s (%s): the deployment has no keepalive route", pe.Code, pe.Message)
			case answered == "" && (pe.Code == client.CodeStaleCall || pe.Code == client.CodeUnsupported):
				answered = pe.Code
				t := time.NewTimer(s.listen)
				defer t.Stop()
				listen = t.C
			default:
				return "", fmt.Errorf("got error %s (%s), want nothing but the probe's stale_call", pe.Code, pe.Message)
			}
		case <-listen:
			if lost := s.drops.Load() - drops; lost > 0 {
				return "", fmt.Errorf("the connection dropped %d time(s) after the keepalive", lost)
			}
			return fmt.Sprintf("sent, no error within %s of the probe's %s; the socket stayed open", s.listen, answered), nil
		case <-c.Done():
			return "", fmt.Errorf("connection ended after the keepalive: %v", c.Err())
		case <-ctx.Done():
			if answered == "" {
				return "", fmt.Errorf("no answer to the probe: %w", ctx.Err())
			}
			return "", ctx.Err()
		}
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
