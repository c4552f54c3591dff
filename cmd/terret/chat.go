package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/termtext"
)

// runChat is an interactive terminal client: it shows the agent's log as a
// conversation and sends what the user types. Input is read line by line from stdin.
func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf := addTargetFlags(fs, env)
	from := fs.Int64("from", 0, "first seq of the history to show")
	dialTimeout := addDialTimeout(fs)
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
	tgt, err := tf.resolve(ctx, env)
	if err != nil {
		return err
	}
	v := newChatView(stdout, isTerminal(stdout), isTerminal(os.Stdin), tgt.agent)
	c, err := client.Dial(ctx, tgt.url, tgt.token, client.Options{DialTimeout: *dialTimeout, OnEvent: v.event, OnNotice: v.notice, OnStatus: v.status})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return explainEnd(err, tgt)
	}
	defer c.Close()
	start := v.startAt(*from)
	if err := c.Subscribe(ctx, start); err != nil && ctx.Err() == nil {
		return err
	}
	return explainEnd(chat(ctx, c, v, os.Stdin), tgt)
}

// chat runs the input loop until /quit, the end of input, an interrupt (ctx), or the
// client stopping (its error is returned).
func chat(ctx context.Context, c *client.Client, v *chatView, in io.Reader) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), protocol.MaxFrameBytes)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-c.Done():
				return
			}
		}
		if err := sc.Err(); err != nil {
			v.problem("input: %v", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			v.endLine()
			return nil
		case <-c.Done():
			v.endLine()
			return c.Err()
		case line, ok := <-lines:
			if !ok {
				if v.echo {
					v.endLine() // Ctrl-D on a terminal: leave now, as /quit does
					return nil
				}
				return v.drain(ctx, c)
			}
			if quit := v.input(ctx, c, line); quit {
				return nil
			}
		}
	}
}

// chatCommand is one parsed input line.
type chatCommand struct {
	kind       string // "" (nothing), inject, cancel, approve, deny, policy, model, help, quit
	text       string // inject
	id, reason string // approve, deny; cancel's reason
	role, spec string // model
	patterns   []string
}

// parseInput reads one line: plain text is an inject, "/" starts a command, "//"
// sends text that starts with "/".
func parseInput(line string) (chatCommand, error) {
	line = strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimSpace(line)
	switch {
	case trimmed == "":
		return chatCommand{}, nil
	case strings.HasPrefix(trimmed, "//"):
		return chatCommand{kind: "inject", text: trimmed[1:]}, nil
	case !strings.HasPrefix(trimmed, "/"):
		return chatCommand{kind: "inject", text: line}, nil
	}
	fields := strings.Fields(trimmed)
	name, rest := fields[0], strings.TrimSpace(strings.TrimPrefix(trimmed, fields[0]))
	args := fields[1:]
	switch name {
	case "/cancel":
		return chatCommand{kind: "cancel", reason: rest}, nil
	case "/approve":
		if len(args) != 1 {
			return chatCommand{}, errors.New("usage: /approve CALL_ID")
		}
		return chatCommand{kind: "approve", id: args[0]}, nil
	case "/deny":
		if len(args) < 1 {
			return chatCommand{}, errors.New("usage: /deny CALL_ID [reason]")
		}
		return chatCommand{kind: "deny", id: args[0], reason: strings.TrimSpace(strings.TrimPrefix(rest, args[0]))}, nil
	case "/policy":
		if len(args) < 1 {
			return chatCommand{}, errors.New("usage: /policy PATTERN... (for example /policy echo s*)")
		}
		return chatCommand{kind: "policy", patterns: args}, nil
	case "/model":
		if len(args) != 2 {
			return chatCommand{}, errors.New("usage: /model ROLE SPEC (for example /model main scripted)")
		}
		return chatCommand{kind: "model", role: args[0], spec: args[1]}, nil
	case "/help", "/?":
		return chatCommand{kind: "help"}, nil
	case "/quit", "/exit":
		return chatCommand{kind: "quit"}, nil
	}
	return chatCommand{}, fmt.Errorf("unknown command %s (/help lists them)", name)
}

const chatHelp = `type a message to send it: it starts a turn, or steers the running one
/cancel [reason]      stop the running turn
/approve ID           run the parked tool call ID
/deny ID [reason]     refuse the parked tool call ID
/policy PATTERN...    allow only the tools matching these globs
/model ROLE SPEC      point a model role (main, titler) at provider/model or scripted
/quit                 leave; the agent keeps running
//text                send text that starts with /`

// chatView renders the log for people. Its methods are the client's callbacks and the
// input loop's messages; a mutex keeps their lines whole.
type chatView struct {
	mu       sync.Mutex
	w        io.Writer
	color    bool // stdout is a terminal
	echo     bool // stdin is a terminal, which already shows what the user typed
	agent    string
	inText   bool              // an assistant answer is streaming on the current line
	names    map[string]string // tool call id → tool name
	own      []string          // texts this chat injected that the log has not shown yet
	history  int64             // the log's tip at connect: events up to it were not sent from here
	turnOpen bool
	parked   map[string]string // call id → tool name: approvals the open turn waits for
	shown    int64             // the seq of the newest event shown: the expect_seq of a steer, cancel or verdict
}

func newChatView(w io.Writer, color, echo bool, agent string) *chatView {
	return &chatView{w: w, color: color, echo: echo, agent: agent, names: map[string]string{}, parked: map[string]string{}}
}

// Terminal styles (SGR codes).
const (
	styleNone   = ""
	styleDim    = "2"
	styleRed    = "31"
	styleGreen  = "32"
	styleYellow = "33"
	styleCyan   = "36"
)

func (v *chatView) paint(style, s string) string {
	if !v.color || style == styleNone {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}

// line prints one whole line, ending a streaming answer first, with every control
// character in s escaped (termtext): the log's texts come from token holders and the
// model. Callers hold mu.
func (v *chatView) line(style, s string) {
	v.endLineLocked()
	fmt.Fprintln(v.w, v.paint(style, termtext.Text(s)))
}

func (v *chatView) endLineLocked() {
	if v.inText {
		fmt.Fprintln(v.w)
		v.inText = false
	}
}

func (v *chatView) endLine() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endLineLocked()
}

func (v *chatView) say(style, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.line(style, fmt.Sprintf(format, args...))
}

func (v *chatView) problem(format string, args ...any) { v.say(styleRed, "! "+format, args...) }

// compactedMarker is how a context/compacted shows, followed by its through_seq: the
// same words as the TypeScript projection and the web page (docs/client-ts.md).
const compactedMarker = "Earlier context summarised through seq"

// event renders one log event.
func (v *chatView) event(ev client.Event) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.shown = ev.Seq
	var p struct {
		Text      string          `json:"text"`
		Index     int             `json:"index"`
		Final     bool            `json:"final"`
		Truncated bool            `json:"truncated"`
		ID        string          `json:"id"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Args      json.RawMessage `json:"args"`
		Result    json.RawMessage `json:"result"`
		Error     *string         `json:"error"`
		Verdict   string          `json:"verdict"`
		Reason    string          `json:"reason"`
		Status    string          `json:"status"`
		Patterns  []string        `json:"patterns"`
		Title     string          `json:"title"`
		Through   int64           `json:"through_seq"`
	}
	_ = json.Unmarshal(ev.Payload, &p) // a payload of other shapes renders with empty fields
	switch ev.Type {
	case "assistant/chunk":
		if p.Index == 0 && v.inText {
			v.endLineLocked() // an answer cut off before its final chunk
		}
		if !v.inText {
			fmt.Fprint(v.w, v.paint(styleGreen, "◆ "))
			v.inText = true
		}
		fmt.Fprint(v.w, termtext.Text(p.Text))
		if p.Final {
			v.endLineLocked()
		}
	case "user/message", "context/injected":
		if ev.Type == "user/message" {
			v.turnOpen = true // the waking text comes just before its turn/start
		}
		if ev.Seq > v.history && v.takeOwn(p.Text, p.Truncated) && v.echo {
			return nil // the terminal showed it as it was typed
		}
		s := "» " + p.Text
		if ev.Type == "context/injected" {
			s += "  (steer)"
		}
		v.line(styleNone, s)
	case "turn/start":
		v.turnOpen = true
	case "turn/end":
		v.turnOpen = false
		clear(v.parked) // a cancelled turn's parked calls end with it
		s := "· turn " + p.Status
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		style := styleDim
		if p.Status == "failed" {
			style = styleRed
		}
		v.line(style, s)
	case "tool/call":
		v.names[p.ID] = p.Name
		v.line(styleCyan, "⚙ "+p.Name+" "+v.compact(p.Args))
	case "tool/result":
		name := v.names[p.CallID]
		if name == "" {
			name = p.CallID
		}
		if p.Error != nil {
			v.line(styleRed, "✗ "+name+" → "+v.clip(*p.Error))
		} else {
			v.line(styleGreen, "✓ "+name+" → "+v.compact(p.Result))
		}
	case "approval/requested":
		v.parked[p.CallID] = p.Name
		v.line(styleYellow, fmt.Sprintf("? approve %s call_id=%s: /approve %s or /deny %s [reason]", p.Name, p.CallID, p.CallID, p.CallID))
	case "approval/resolved":
		delete(v.parked, p.CallID)
		s := "· " + p.Verdict + " " + p.CallID
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		v.line(styleDim, s)
	case "policy/updated":
		s := strings.Join(p.Patterns, " ")
		if len(p.Patterns) == 0 {
			s = "(no tool allowed)"
		}
		v.line(styleDim, "· policy: "+s)
	case "session/titled":
		v.line(styleDim, "· title: "+p.Title)
	case "context/compacted":
		// A marker, not the summary: the model sees the summary from here on, the log
		// (and this chat) still holds every event.
		v.line(styleDim, fmt.Sprintf("· %s %d", compactedMarker, p.Through))
	case "session/created":
	default:
		v.line(styleDim, "· "+ev.Type+" "+v.compact(ev.Payload))
	}
	return nil
}

// takeOwn reports whether text is one this chat injected (and forgets it). The log
// cuts long texts, marking them truncated.
func (v *chatView) takeOwn(text string, truncated bool) bool {
	for i, t := range v.own {
		if t == text || (truncated && strings.HasPrefix(t, text)) {
			v.own = append(v.own[:i], v.own[i+1:]...)
			return true
		}
	}
	return false
}

// compact renders JSON on one line, clipped in a terminal.
func (v *chatView) compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return v.clip(string(raw))
	}
	return v.clip(b.String())
}

func (v *chatView) clip(s string) string {
	const max = 300
	s = strings.ReplaceAll(s, "\n", `\n`)
	if !v.color || utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max]) + "…"
}

// seen is the seq of the newest event shown.
func (v *chatView) seen() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.shown
}

// staleText is how a stale answer shows: the frame was sent for what the screen
// showed, and the agent had moved on.
const staleText = "the agent moved on — look again"

func (v *chatView) notice(n client.Notice) {
	var rt *client.ReplayTruncated
	if errors.As(n, &rt) {
		v.say(styleDim, "· history before seq %d is not replayed (the server's replay limit)", rt.From)
		return
	}
	var pe *client.ProtocolError
	if errors.As(n, &pe) && pe.Code == client.CodeStale {
		v.mu.Lock()
		v.own = nil // a stale steer is not logged: nothing to wait for
		v.mu.Unlock()
		v.problem("%s (%s)", staleText, pe.Message)
		return
	}
	if errors.As(n, &pe) && pe.Code == client.CodeBadFrame {
		v.mu.Lock()
		v.own = nil // the refused frame may have been an inject: nothing to wait for
		v.mu.Unlock()
	}
	v.problem("%s", n.Error())
}

func (v *chatView) status(s client.Status) {
	switch {
	case s.State == client.StateConnected && s.Attempt == 0:
		v.mu.Lock()
		v.history = s.Hello.LastSeq
		v.mu.Unlock()
		v.say(styleDim, "· connected to %s (log at seq %d); type a message, or /help", v.agent, s.Hello.LastSeq)
	default:
		if line := describeStatus(s); line != "" {
			v.say(styleDim, "· %s", line)
		}
	}
}

// startAt is the seq to subscribe from for --from: from itself, or the log's tip + 1
// when from is past it. The server would answer such a subscribe with replay_truncated
// and start at the tip + 1 anyway; chat says so here, so that an empty screen never
// leaves the user guessing, and the events of the turns it starts show.
func (v *chatView) startAt(from int64) int64 {
	v.mu.Lock()
	tip := v.history
	v.mu.Unlock()
	if from <= tip+1 {
		return from
	}
	v.say(styleDim, "· replay_truncated: the log ends at seq %d, before --from %d; showing what comes from seq %d on", tip, from, tip+1)
	return tip + 1
}

// input carries out one line; it reports whether the user asked to quit.
func (v *chatView) input(ctx context.Context, c *client.Client, line string) (quit bool) {
	cmd, err := parseInput(line)
	if err != nil {
		v.problem("%v", err)
		return false
	}
	switch cmd.kind {
	case "":
	case "inject":
		v.mu.Lock()
		v.own = append(v.own, cmd.text)
		steer, seen := v.turnOpen, v.shown
		v.mu.Unlock()
		if steer { // lands in the turn on screen, or not at all (stale)
			err = c.InjectExpect(ctx, cmd.text, true, seen)
		} else {
			err = c.Inject(ctx, cmd.text, true)
		}
		if err != nil {
			v.mu.Lock()
			v.takeOwn(cmd.text, false)
			v.mu.Unlock()
		}
	case "cancel": // the turn on screen, or none (stale)
		err = c.CancelExpect(ctx, cmd.reason, v.seen())
	case "approve":
		err = c.ApproveExpect(ctx, cmd.id, v.seen())
	case "deny":
		err = c.DenyExpect(ctx, cmd.id, cmd.reason, v.seen())
	case "policy":
		err = c.SetPolicy(ctx, cmd.patterns)
	case "model":
		err = c.SetModel(ctx, cmd.role, cmd.spec)
	case "help":
		v.say(styleDim, "%s", chatHelp)
	case "quit":
		return true
	}
	if err != nil && ctx.Err() == nil && c.Err() == nil {
		v.problem("not sent: %v", err)
	}
	return false
}

// drain runs when input ends: it waits for what was sent to show in the log and the
// running turn to end, so that `echo hi | terret chat` shows the answer. A turn parked
// on an approval cannot end without the user, whose input has ended: drain says so
// and returns, leaving the call parked for another client to approve or deny.
func (v *chatView) drain(ctx context.Context, c *client.Client) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		v.mu.Lock()
		busy := v.turnOpen || len(v.own) > 0
		if busy && len(v.own) == 0 && len(v.parked) > 0 {
			v.leaveParkedLocked()
			v.mu.Unlock()
			return nil
		}
		v.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			v.endLine()
			return c.Err()
		case <-tick.C:
		}
	}
}

// leaveParkedLocked says which calls the turn is parked on, in call id order, and how
// to resolve them once chat has left. Callers hold mu.
func (v *chatView) leaveParkedLocked() {
	ids := slices.Sorted(maps.Keys(v.parked))
	for _, id := range ids {
		v.line(styleYellow, fmt.Sprintf("· input ended with the turn parked on approval of %s call_id=%s: leaving it parked", v.parked[id], id))
	}
	v.line(styleDim, fmt.Sprintf("· to resolve it, run %s chat --agent %s and type /approve ID or /deny ID (or use the web page); until then the turn waits", invokedAs(), v.agent))
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
