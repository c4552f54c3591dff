package sessionlog

import "testing"

// TestObserveTip: a read's tip replaces the cached one, lower or not, unless the cache
// moved while the read was in flight (an append of this process it may have missed).
func TestObserveTip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		cached     int64
		hadCached  bool
		before     int64
		hadBefore  bool
		read, want int64
	}{
		{"log started over: lowered", 10, true, 10, true, 0, 0},
		{"log grew elsewhere: raised", 10, true, 10, true, 14, 14},
		{"an append landed during the read: kept", 11, true, 10, true, 10, 11},
		{"first sight during an append: kept", 11, true, 0, false, 10, 11},
		{"nothing cached: taken", 0, false, 0, false, 7, 7},
	}
	for _, c := range cases {
		l := New(nil, "t")
		if c.hadCached {
			l.tips["s"] = c.cached
		}
		l.observeTip("s", c.read, c.before, c.hadBefore)
		if got := l.tips["s"]; got != c.want {
			t.Errorf("%s: cached tip %d, want %d", c.name, got, c.want)
		}
	}
}
