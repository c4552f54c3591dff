// Package schedule is an agent's schedules: the records (one per schedule in the agents
// table), the rules of a spec (at, in, every, cron with an IANA time zone), the times
// they come due, and the fire — a durable inject with wake that happens once per
// schedule and due time, however often the engine delivers it (docs/agents.md,
// "Schedules"; docs/architecture.md, "Schedules"). The engine that delivers the fires
// is behind the Engine interface: an in-process timer under terret dev (Local), and
// EventBridge Scheduler on AWS (EventBridge).
package schedule

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Errors of this package.
var (
	// ErrBadSpec: a spec breaks a rule; the *SpecError it wraps names the field.
	ErrBadSpec = errors.New("schedule: bad spec")
	// ErrNotFound: no schedule of that id.
	ErrNotFound = errors.New("schedule: no such schedule")
	// ErrQuota: the agent has as many schedules as its profile allows.
	ErrQuota = errors.New("schedule: too many schedules")
	// ErrDuplicate: a fire already logged (or its schedule gone): nothing was done.
	ErrDuplicate = errors.New("schedule: fire already logged")
	// ErrRefused: the agent refused the fire's inject (a full inbox, a text too long).
	ErrRefused = errors.New("schedule: fire refused")
)

// SpecError is a bad spec: Field is the spec's field at fault ("at", "every", "tz", …).
type SpecError struct {
	Field, Message string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Message }

// Unwrap makes a SpecError an ErrBadSpec.
func (e *SpecError) Unwrap() error { return ErrBadSpec }

func bad(field, format string, args ...any) error {
	return &SpecError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Spec is what a caller asks for: the body of POST /agents/{agent_id}/schedules, the
// flags of `terret schedule set`, the schedule tool's arguments. Exactly one of At, In,
// Every and Cron; TZ only with Cron.
type Spec struct {
	Text  string `json:"text"`
	ID    string `json:"id,omitempty"`
	At    string `json:"at,omitempty"`    // RFC 3339
	In    string `json:"in,omitempty"`    // a Go duration: "90s", "2h"
	Every string `json:"every,omitempty"` // a Go duration
	Cron  string `json:"cron,omitempty"`  // 5 fields: minute hour day-of-month month day-of-week
	TZ    string `json:"tz,omitempty"`    // IANA zone of Cron (default UTC)
}

// Schedule is a schedule as stored and as answered (JSON).
type Schedule struct {
	ID    string `json:"id" dynamodbav:"id"`
	Text  string `json:"text" dynamodbav:"text"`
	At    string `json:"at,omitempty" dynamodbav:"at,omitempty"` // a one-shot's time (also for In)
	In    string `json:"in,omitempty" dynamodbav:"in,omitempty"`
	Every string `json:"every,omitempty" dynamodbav:"every,omitempty"`
	Cron  string `json:"cron,omitempty" dynamodbav:"cron,omitempty"`
	TZ    string `json:"tz,omitempty" dynamodbav:"tz,omitempty"`
	// NextAt is the next due time (TimeFormat, UTC).
	NextAt string `json:"next_at" dynamodbav:"next_at"`
	// Anchor is where an Every schedule counts its intervals from (its set time).
	Anchor string `json:"created_at" dynamodbav:"anchor"`
	// LastFireAt is the due time of the newest fire logged ("" before the first).
	LastFireAt string `json:"last_fire_at,omitempty" dynamodbav:"last_fire_at,omitempty"`
}

// TimeFormat is the format of every stored time: UTC, fixed width, so that times
// compare as strings in DynamoDB conditions.
const TimeFormat = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a stored or delivered time (any RFC 3339).
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// Bounds are the rules that vary with the engine and the profile.
type Bounds struct {
	// MinEvery is the shortest interval (Local: 1 s; EventBridge: 1 min).
	MinEvery time.Duration
	// MaxText bounds a schedule's text in bytes (the inject's bound).
	MaxText int
}

// MaxIDLength bounds a schedule id; ids are letters, digits, '-', '_' and '.'.
const MaxIDLength = 64

// idChars are an id's characters; MaxIDLength bounds it apart (a bounded repetition
// would compile into 64 copies of the class at every cold start).
var idChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// cronParser reads the 5 standard fields, no descriptors, no seconds.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Build checks sp against b and returns the schedule it makes at now, with its first
// due time. A bad spec is a *SpecError naming the field.
func Build(sp Spec, b Bounds, now time.Time) (Schedule, error) {
	s := Schedule{ID: sp.ID, Text: sp.Text, Anchor: formatTime(now)}
	if strings.TrimSpace(sp.Text) == "" {
		return Schedule{}, bad("text", "is required and must not be blank")
	}
	if b.MaxText > 0 && len(sp.Text) > b.MaxText {
		return Schedule{}, bad("text", "is %d bytes, over the bound of %d", len(sp.Text), b.MaxText)
	}
	if s.ID == "" {
		s.ID = NewID()
	} else if len(s.ID) > MaxIDLength || !idChars.MatchString(s.ID) {
		return Schedule{}, bad("id", "must be 1–%d letters, digits, '-', '_' or '.', got %q", MaxIDLength, s.ID)
	}
	var given []string
	for _, f := range []struct{ name, v string }{{"at", sp.At}, {"in", sp.In}, {"every", sp.Every}, {"cron", sp.Cron}} {
		if f.v != "" {
			given = append(given, f.name)
		}
	}
	if len(given) != 1 {
		field := "at"
		if len(given) > 1 {
			field = given[1]
		}
		return Schedule{}, bad(field, "give exactly one of at, in, every, cron (given: %s)", orNone(given))
	}
	if sp.TZ != "" && sp.Cron == "" {
		return Schedule{}, bad("tz", "only goes with cron")
	}
	switch {
	case sp.At != "":
		at, err := time.Parse(time.RFC3339Nano, sp.At)
		if err != nil {
			return Schedule{}, bad("at", "not an RFC 3339 time (like 2026-12-06T09:00:00Z): %q", sp.At)
		}
		if at.Before(now.Add(-time.Second)) {
			return Schedule{}, bad("at", "%s is in the past", sp.At)
		}
		s.At, s.NextAt = formatTime(at), formatTime(at)
	case sp.In != "":
		d, err := time.ParseDuration(sp.In)
		if err != nil || d <= 0 {
			return Schedule{}, bad("in", "not a positive duration (like 90s, 2h): %q", sp.In)
		}
		s.In, s.At = sp.In, formatTime(now.Add(d))
		s.NextAt = s.At
	case sp.Every != "":
		d, err := time.ParseDuration(sp.Every)
		if err != nil || d <= 0 {
			return Schedule{}, bad("every", "not a positive duration (like 30s, 1h): %q", sp.Every)
		}
		if d < b.MinEvery {
			return Schedule{}, bad("every", "%s is shorter than the shortest interval here, %s", sp.Every, b.MinEvery)
		}
		s.Every = sp.Every
	case sp.Cron != "":
		if strings.Contains(sp.Cron, "=") || strings.HasPrefix(strings.TrimSpace(sp.Cron), "@") {
			return Schedule{}, bad("cron", "5 fields (minute hour day-of-month month day-of-week), no descriptors or TZ=: %q", sp.Cron)
		}
		if _, err := cronParser.Parse(sp.Cron); err != nil {
			return Schedule{}, bad("cron", "%v (5 fields: minute hour day-of-month month day-of-week): %q", err, sp.Cron)
		}
		tz := sp.TZ
		if tz == "" {
			tz = "UTC"
		}
		if _, err := time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
			return Schedule{}, bad("tz", "not an IANA time zone (like Europe/Paris): %q", sp.TZ)
		}
		s.Cron, s.TZ = sp.Cron, tz
	}
	if s.NextAt == "" {
		next, ok := s.Next(now)
		if !ok {
			return Schedule{}, bad(given[0], "never comes due")
		}
		s.NextAt = formatTime(next)
	}
	return s, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// OneShot reports whether s fires once (at, in).
func (s Schedule) OneShot() bool { return s.Every == "" && s.Cron == "" }

// Next is s's first due time strictly after t; false when there is none (a one-shot
// whose time is not after t). Fires missed before t are skipped: the caller fires the
// oldest one it owes and then asks Next from the present, so missed fires come as one.
func (s Schedule) Next(t time.Time) (time.Time, bool) {
	switch {
	case s.Every != "":
		d, err := time.ParseDuration(s.Every)
		if err != nil || d <= 0 {
			return time.Time{}, false
		}
		anchor, err := ParseTime(s.Anchor)
		if err != nil {
			return time.Time{}, false
		}
		if t.Before(anchor) {
			return anchor.Add(d), true
		}
		k := t.Sub(anchor)/d + 1
		return anchor.Add(k * d), true
	case s.Cron != "":
		loc, err := time.LoadLocation(s.TZ)
		if err != nil {
			return time.Time{}, false
		}
		sched, err := cronParser.Parse(s.Cron)
		if err != nil {
			return time.Time{}, false
		}
		next := sched.Next(t.In(loc))
		for i := 0; i < 4 && repeated(next); i++ {
			next = sched.Next(next) // a wall-clock time the fall-back hour brings twice fires once
		}
		return next.UTC(), !next.IsZero()
	default:
		at, err := ParseTime(s.At)
		if err != nil || !at.After(t) {
			return time.Time{}, false
		}
		return at, true
	}
}

// repeated reports whether t (in its zone) is the second instant of its wall-clock
// time: the clock was set back over it, and the same local time came before.
func repeated(t time.Time) bool {
	_, now := t.Zone()
	_, before := t.Add(-6 * time.Hour).Zone()
	if before <= now {
		return false
	}
	shift := time.Duration(before-now) * time.Second
	return wall(t.Add(-shift)) == wall(t)
}

func wall(t time.Time) string { return t.Format("2006-01-02 15:04") }

// NewID returns a new schedule id.
func NewID() string {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	return "s_" + hex.EncodeToString(b)
}
