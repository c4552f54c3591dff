package delivery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestWasReset: a token item's stream record closes the owner connection for a reset
// only when it carries a reset marker that is new (absent before, or another value),
// and names the connection that owned the agent then ("" for none); a marker without
// that name (written before it was recorded) closes any owner.
func TestWasReset(t *testing.T) {
	t.Parallel()
	img := func(reset string, conn ...string) map[string]events.DynamoDBAttributeValue {
		m := map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("tokens#a1")}
		if reset != "" {
			m[resetAttr] = events.NewStringAttribute(reset)
		}
		if len(conn) > 0 {
			m[resetConnAttr] = events.NewStringAttribute(conn[0])
		}
		return m
	}
	cases := []struct {
		name     string
		old, new map[string]events.DynamoDBAttributeValue
		want     bool
		marker   resetMarker
	}{
		{"first reset, c1 connected", img(""), img("e1", "c1"), true, resetMarker{conn: "c1"}},
		{"another reset, nobody connected", img("e1", "c1"), img("e2", ""), true, resetMarker{conn: ""}},
		{"a marker without the owner", img(""), img("e1"), true, resetMarker{any: true}},
		{"token rotated since a reset", img("e1", "c1"), img("e1", "c1"), false, resetMarker{}},
		{"no reset ever", img(""), img(""), false, resetMarker{}},
		{"token item removed (delete)", img("e1"), nil, false, resetMarker{}},
		{"marker not a string", img(""), map[string]events.DynamoDBAttributeValue{resetAttr: events.NewNumberAttribute("1")}, false, resetMarker{}},
	}
	for _, c := range cases {
		r := events.DynamoDBEventRecord{EventName: "MODIFY", Change: events.DynamoDBStreamRecord{OldImage: c.old, NewImage: c.new}}
		if m, got := wasReset(r); got != c.want || m != c.marker {
			t.Errorf("%s: wasReset = %+v, %v; want %+v, %v", c.name, m, got, c.marker, c.want)
		}
	}
}

// TestCloseReset: a reset closes the owner connection only if it is the one that owned
// the agent when the reset wrote its marker (or the marker does not say): a connection
// that claimed the agent after the new seq 0 read the new epoch for its hello and stays
// open.
func TestCloseReset(t *testing.T) {
	t.Parallel()
	const agent = "a"
	cases := []struct {
		name   string
		owner  string // the connection owning the agent when the marker is handled
		marker resetMarker
		closed bool
	}{
		{"the owner at the reset", "c1", resetMarker{conn: "c1"}, true},
		{"connected after the reset, another owned it then", "c2", resetMarker{conn: "c1"}, false},
		{"connected after the reset, nobody owned it then", "c2", resetMarker{conn: ""}, false},
		{"a marker that does not say", "c2", resetMarker{any: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
			log.append(agent, 1)
			records.claim(agent, tc.owner)
			d := newDeliverer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, log, records, memSlots{}, socket, nil)
			if err := d.closeReset(context.Background(), agent, tc.marker); err != nil {
				t.Fatal(err)
			}
			_, err := records.Owner(context.Background(), agent)
			gone := err != nil
			if frames := socket.seen(t, tc.owner); gone != tc.closed || slices.Contains(frames, "error") != tc.closed {
				t.Fatalf("owner record gone %v (%v), frames to %s %v; want closed %v", gone, err, tc.owner, frames, tc.closed)
			}
		})
	}
}
