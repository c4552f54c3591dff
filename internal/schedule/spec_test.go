package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var testBounds = Bounds{MinEvery: time.Second, MaxText: 1000}

// TestNext walks each kind of schedule from a clock the test sets: the due times in
// order, across the daylight-saving changes of the cron's zone.
func TestNext(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		now  string
		want []string // successive due times, each Next from the one before
	}{
		{"at", Spec{At: "2026-03-01T10:00:00+01:00"}, "2026-03-01T08:00:00Z", []string{"2026-03-01T09:00:00Z"}},
		{"in", Spec{In: "90s"}, "2026-03-01T08:00:00Z", []string{"2026-03-01T08:01:30Z"}},
		{"every", Spec{Every: "1h"}, "2026-03-01T08:00:00Z", []string{"2026-03-01T09:00:00Z", "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z"}},
		// New York springs forward on 2026-03-08 (02:00 EST → 03:00 EDT) and falls back
		// on 2026-11-01: 09:00 local stays 09:00 local, so 14:00Z becomes 13:00Z.
		{"cron across spring forward", Spec{Cron: "0 9 * * *", TZ: "America/New_York"}, "2026-03-06T20:00:00Z",
			[]string{"2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"}},
		{"cron across fall back", Spec{Cron: "0 9 * * *", TZ: "America/New_York"}, "2026-10-30T20:00:00Z",
			[]string{"2026-10-31T13:00:00Z", "2026-11-01T14:00:00Z", "2026-11-02T14:00:00Z"}},
		// 02:30 does not exist on 2026-03-08 in New York: that day has no fire at 02:30.
		{"cron in the skipped hour", Spec{Cron: "30 2 * * *", TZ: "America/New_York"}, "2026-03-06T20:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}},
		// 01:30 comes twice on 2026-11-01 in New York: it fires once.
		{"cron in the repeated hour", Spec{Cron: "30 1 * * *", TZ: "America/New_York"}, "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"cron weekdays UTC", Spec{Cron: "0 9 * * 1-5"}, "2026-12-04T10:00:00Z", // a Friday
			[]string{"2026-12-07T09:00:00Z", "2026-12-08T09:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := tt.spec
			sp.Text = "wake"
			s, err := Build(sp, testBounds, mustTime(t, tt.now))
			if err != nil {
				t.Fatal(err)
			}
			got := []string{s.NextAt}
			due := mustTime(t, s.NextAt)
			for len(got) < len(tt.want) {
				next, ok := s.Next(due)
				if !ok {
					break
				}
				got = append(got, formatTime(next))
				due = next
			}
			if next, ok := s.Next(due); s.OneShot() && ok {
				t.Fatalf("one-shot has a due time after its own: %s", next)
			}
			for i := range tt.want {
				tt.want[i] = formatTime(mustTime(t, tt.want[i]))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("due times %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("due times %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestNextCoalesces: asked from long after a missed due time, Next gives the first one
// after the present, not each one missed.
func TestNextCoalesces(t *testing.T) {
	now := mustTime(t, "2026-03-01T08:00:00Z")
	s, err := Build(Spec{Text: "x", Every: "10s"}, testBounds, now)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour + 5*time.Second)
	next, _ := s.Next(later)
	if want := now.Add(time.Hour + 10*time.Second); !next.Equal(want) {
		t.Fatalf("next after an hour down: %s, want %s", next, want)
	}
}

// TestBuildRefuses: each bad spec is an ErrBadSpec naming its field.
func TestBuildRefuses(t *testing.T) {
	now := mustTime(t, "2026-03-01T08:00:00Z")
	tests := []struct {
		name  string
		spec  Spec
		field string
	}{
		{"no text", Spec{In: "1m"}, "text"},
		{"text too long", Spec{Text: string(make([]byte, 1001)), In: "1m"}, "text"},
		{"none of the kinds", Spec{Text: "x"}, "at"},
		{"two kinds", Spec{Text: "x", At: "2026-03-01T09:00:00Z", Every: "1h"}, "every"},
		{"bad at", Spec{Text: "x", At: "tomorrow"}, "at"},
		{"at in the past", Spec{Text: "x", At: "2026-03-01T07:00:00Z"}, "at"},
		{"bad in", Spec{Text: "x", In: "soon"}, "in"},
		{"negative in", Spec{Text: "x", In: "-5s"}, "in"},
		{"bad every", Spec{Text: "x", Every: "daily"}, "every"},
		{"every too short", Spec{Text: "x", Every: "500ms"}, "every"},
		{"bad cron", Spec{Text: "x", Cron: "0 9 * *"}, "cron"},
		{"cron out of range", Spec{Text: "x", Cron: "61 9 * * *"}, "cron"},
		{"cron descriptor", Spec{Text: "x", Cron: "@daily"}, "cron"},
		{"cron TZ prefix", Spec{Text: "x", Cron: "CRON_TZ=UTC 0 9 * * *"}, "cron"},
		{"bad tz", Spec{Text: "x", Cron: "0 9 * * *", TZ: "Mars/Olympus"}, "tz"},
		{"tz without cron", Spec{Text: "x", Every: "1h", TZ: "UTC"}, "tz"},
		{"bad id", Spec{Text: "x", Every: "1h", ID: "a b"}, "id"},
		{"id one over the bound", Spec{Text: "x", Every: "1h", ID: strings.Repeat("a", MaxIDLength+1)}, "id"},
		{"id with a slash", Spec{Text: "x", Every: "1h", ID: "a/b"}, "id"},
	}
	for _, id := range []string{strings.Repeat("a", MaxIDLength), "a", "A.b-c_9"} {
		if s, err := Build(Spec{Text: "x", Every: "1h", ID: id}, testBounds, now); err != nil || s.ID != id {
			t.Errorf("Build with id %q: %+v, %v; want it kept", id, s, err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.spec, testBounds, now)
			var se *SpecError
			if !errors.Is(err, ErrBadSpec) || !errors.As(err, &se) || se.Field != tt.field {
				t.Fatalf("Build: %v, want a bad spec naming %q", err, tt.field)
			}
		})
	}
}
