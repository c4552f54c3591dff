package sessionlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestExpire: Expire sets an event's TTL attribute and nothing else (the envelope reads
// back byte for byte, with Expires), refuses seq 0, and leaves a seq that is not there
// absent (a reset or delete meanwhile); Expired is the readers' test of it.
func TestExpire(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	ctx := context.Background()
	const s = "s"
	mustCreate(t, l, s)
	ev, err := l.Append(ctx, s, "test/event", map[string]int{"i": 1})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Unix()
	if err := l.Expire(ctx, s, 1, at); err != nil {
		t.Fatal(err)
	}
	if err := l.Expire(ctx, s, 0, at); !errors.Is(err, sessionlog.ErrInvalid) {
		t.Errorf("Expire(seq 0) = %v, want ErrInvalid: session/created never expires", err)
	}
	if err := l.Expire(ctx, s, 5, at); err != nil {
		t.Errorf("Expire(seq 5, not there) = %v, want nil", err)
	}
	evs := readAll(t, l, s)
	if len(evs) != 2 {
		t.Fatalf("read %d events, want 2: Expire must not create an item", len(evs))
	}
	got := evs[1]
	before, _ := ev.MarshalJSON()
	after, _ := got.MarshalJSON()
	if got.Expires != at || string(before) != string(after) || evs[0].Expires != 0 {
		t.Errorf("read back %s expires %d (seq 0 expires %d); want %s expires %d, seq 0 never", after, got.Expires, evs[0].Expires, before, at)
	}
	now := time.Unix(at, 0)
	if !got.Expired(now) || got.Expired(now.Add(-time.Second)) || evs[0].Expired(now.Add(time.Hour)) {
		t.Errorf("Expired: want true from %d on, false before, and never without expires_at", at)
	}
}
