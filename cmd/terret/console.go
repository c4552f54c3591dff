package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/termtext"
)

// consoleLogger is terret dev's logger: human-readable lines (text) or the deployed
// functions' JSON (json), at level.
func consoleLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, ok := service.Level(level)
	if !ok {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "text":
		return slog.New(&consoleHandler{w: w, level: l, mu: &sync.Mutex{}}), nil
	case "json":
		// slog escapes C0 controls in JSON strings, not DEL, C1 controls or overrides.
		return slog.New(slog.NewJSONHandler(termtext.Writer(w), &slog.HandlerOptions{Level: l})), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// consoleHandler writes one line per record: time, level (unless info), message, then
// key=value pairs, quoted where they hold spaces. Lambda request ids are left out:
// locally they identify nothing a person looks up.
type consoleHandler struct {
	w     io.Writer
	level slog.Level
	mu    *sync.Mutex
	attrs []slog.Attr
	group string
}

func (h *consoleHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *consoleHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("15:04:05.000"))
	if r.Level != slog.LevelInfo {
		b.WriteString(" " + r.Level.String())
	}
	b.WriteString(" " + termtext.Line(r.Message))
	for _, a := range h.attrs {
		writeAttr(&b, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b.Bytes())
	return err
}

func writeAttr(b *bytes.Buffer, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Key == "request_id" || a.Equal(slog.Attr{}) {
		return
	}
	key := a.Key
	if prefix != "" {
		key = prefix + "." + key
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, key, g)
		}
		return
	}
	// A value may come from a client or a web page: one with a control character is
	// quoted, which escapes it (strconv.Quote escapes every non-printable rune).
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\n\"") || !termtext.Safe(v) {
		v = strconv.Quote(v)
	}
	b.WriteString(" " + termtext.Line(key) + "=" + v)
}

func (h *consoleHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *consoleHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// prefixWriter writes each whole line it is given to w with prefix in front; a last
// partial line waits for its end.
func prefixWriter(w io.Writer, prefix string) io.Writer {
	return &linePrefixer{w: w, prefix: prefix}
}

type linePrefixer struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := p.partial[:i+1]
		if len(bytes.TrimSpace(line)) > 0 {
			if _, err := io.WriteString(p.w, p.prefix+string(line)); err != nil {
				return len(b), err
			}
		}
		p.partial = p.partial[i+1:]
	}
}
