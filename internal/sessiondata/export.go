package sessiondata

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// exportPage is the events one read of an export holds: memory stays bounded by one
// page (at most 1,000 events of at most 128 KiB) whatever the log's length.
const exportPage = 1000

// Export writes agentID's events with seq in [from, to] to w in seq order, one JSON
// line each: the envelope exactly as a subscriber receives it (sessionlog.Event's
// MarshalJSON, the encoder delivery posts with). to < 0 means the tip when the export
// starts, so an export of a live log ends. It returns the number of events written.
// Retention: an export from below the oldest retained event starts there, as a
// subscribe's replay does (sessionlog.Retained), and an event expired but not yet
// deleted by TTL is left out. Cost: 1 read unit for the tip, 1 for where the retained
// log starts, then strongly consistent Query pages of 1,000 events — 1 read unit per
// 4 KB read.
func (st *Store) Export(ctx context.Context, agentID string, from, to int64, w io.Writer) (int64, error) {
	if from < 0 {
		return 0, fmt.Errorf("%w: from %d is negative", ErrInvalid, from)
	}
	tip, err := st.log.Tip(ctx, agentID)
	if errors.Is(err, sessionlog.ErrNotFound) {
		return 0, fmt.Errorf("sessiondata: export %s: %w", agentID, err)
	}
	if err != nil {
		return 0, err
	}
	if to < 0 || to > tip {
		to = tip
	}
	if from <= tip {
		if from, err = st.log.Retained(ctx, agentID, from); err != nil {
			return 0, fmt.Errorf("sessiondata: export %s: %w", agentID, err)
		}
	}
	now := st.now()
	bw := bufio.NewWriterSize(w, 64<<10)
	var n int64
	total := to - from + 1
	for next := from; next <= to; {
		page, err := st.log.Read(ctx, agentID, next, int(min(exportPage, to-next+1)))
		if err != nil {
			return n, fmt.Errorf("sessiondata: export %s from %d: %w", agentID, next, err)
		}
		if len(page) == 0 {
			break
		}
		for _, ev := range page {
			if ev.Seq > to {
				break
			}
			next = ev.Seq + 1
			if ev.Expired(now) {
				continue // TTL deletes lazily: gone for every reader
			}
			b, err := ev.MarshalJSON()
			if err != nil {
				return n, fmt.Errorf("sessiondata: export %s seq %d: %w", agentID, ev.Seq, err)
			}
			if _, err := bw.Write(append(b, '\n')); err != nil {
				return n, fmt.Errorf("sessiondata: export %s: write: %w", agentID, err)
			}
			n++
			if n%int64(st.o.ProgressEvery) == 0 {
				st.progress("exported %d of %d events (through seq %d)", n, total, ev.Seq)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("sessiondata: export %s: write: %w", agentID, err)
	}
	return n, nil
}
