package agent

import (
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/model"
)

// chunker turns a model's text deltas into assistant/chunk events.
//
// The flush rule: the newest delta is always held back. When a delta arrives, the text
// buffered before it is written as one chunk if the model marked its last delta as a
// boundary (model.Delta.Boundary — the scripted model does, on every delta), or at
// least flushBytes bytes are buffered, or the oldest buffered byte is flushAge old;
// otherwise the new delta joins the buffer. When the stream ends, the buffer is
// written as the output's last chunk with "final": true and the call's usage. So
// tiny token deltas cost one write per flushBytes or flushAge, not one per token; a
// boundary-marked stream of N deltas gives exactly N chunks; and the final marker —
// which tells a resumed runner that this output finished — costs no extra event. A
// chunk longer than MaxChunkBytes is split into several events.
type chunker struct {
	write      func(c assistantChunk) error
	now        func() time.Time
	flushBytes int
	flushAge   time.Duration

	buf      strings.Builder
	have     bool // buf holds a delta (maybe an empty one)
	bufAt    time.Time
	boundary bool
	index    int
	err      error // the first write error; the stream is aborted with it
}

func (c *chunker) delta(d model.Delta) error {
	if c.err != nil {
		return c.err
	}
	if d.Text == "" && !d.Boundary {
		return nil
	}
	if c.have && (c.boundary || c.buf.Len() >= c.flushBytes || c.now().Sub(c.bufAt) >= c.flushAge) {
		if err := c.flush(false, nil); err != nil {
			c.err = err
			return err
		}
	}
	if !c.have {
		c.bufAt = c.now()
	}
	c.buf.WriteString(d.Text)
	c.have = true
	c.boundary = d.Boundary
	return nil
}

// wrote reports whether the output has any text (written or buffered).
func (c *chunker) wrote() bool { return c.have || c.index > 0 }

// finish writes the buffered text as the final chunk carrying usage.
func (c *chunker) finish(usage *modelUsage) error {
	if c.err != nil {
		return c.err
	}
	if !c.wrote() {
		return nil
	}
	return c.flush(true, usage)
}

// abort writes buffered text of a failed stream as a chunk that is not final.
func (c *chunker) abort() error {
	if c.err != nil || !c.have || c.buf.Len() == 0 {
		return c.err
	}
	return c.flush(false, nil)
}

func (c *chunker) flush(final bool, usage *modelUsage) error {
	text := c.buf.String()
	c.buf.Reset()
	c.have = false
	pieces := splitText(text, MaxChunkBytes)
	for i, p := range pieces {
		ch := assistantChunk{Text: p, Index: c.index}
		if final && i == len(pieces)-1 {
			ch.Final = true
			ch.Usage = usage
		}
		if err := c.write(ch); err != nil {
			return err
		}
		c.index++
	}
	return nil
}
