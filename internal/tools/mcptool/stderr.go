package mcptool

import (
	"bytes"
	"io"
	"sync"
)

// namedLines writes each complete line written to it to w with prefix before it, so
// that a command server's stderr says which server wrote it; a line is written whole
// (two servers' lines never mix within one). A last line the server never ends with a
// newline is not written.
type namedLines struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (n *namedLines) Write(b []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.partial = append(n.partial, b...)
	for {
		i := bytes.IndexByte(n.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := append([]byte(n.prefix), n.partial[:i+1]...)
		n.partial = n.partial[i+1:]
		if _, err := n.w.Write(line); err != nil {
			return len(b), err
		}
	}
}
