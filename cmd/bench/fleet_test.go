package main

import (
	"encoding/json"
	"testing"
	"time"
)

// TestFrameLogged: an event's at decodes into Logged (the append time the agents phase
// measures from), not into At, the receipt time the reader stamps.
func TestFrameLogged(t *testing.T) {
	var f frame
	if err := json.Unmarshal([]byte(`{"seq":3,"type":"turn/end","at":"2026-12-01T10:40:55.123456Z","payload":{}}`), &f); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 12, 1, 10, 40, 55, 123456000, time.UTC)
	if !f.Logged.Equal(want) || !f.At.IsZero() || f.Seq == nil || *f.Seq != 3 {
		t.Errorf("decoded %+v; want Logged %v, At zero, seq 3", f, want)
	}
}

func TestAgentCounts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"10,50,200", []int{10, 50, 200}, false},
		{" 5 ", []int{5}, false},
		{"10,x", nil, true},
		{"0", nil, true},
		{"", nil, true},
	} {
		got, err := agentCounts(c.in)
		if (err != nil) != c.bad || len(got) != len(c.want) {
			t.Errorf("agentCounts(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("agentCounts(%q) = %v, want %v", c.in, got, c.want)
			}
		}
	}
}
