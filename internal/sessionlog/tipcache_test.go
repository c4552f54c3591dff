package sessionlog

import "testing"

// TestObserveTip: a read's tip replaces the cached one, lower or not, unless the cache
// moved while the read was in flight (an append of this process it may have missed) —
// within one epoch: a tip of another epoch always replaces it.
func TestObserveTip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		cached     mark
		hadCached  bool
		before     mark
		hadBefore  bool
		read, want mark
	}{
		{"log started over: lowered", mark{10, "a"}, true, mark{10, "a"}, true, mark{0, "b"}, mark{0, "b"}},
		{"log grew elsewhere: raised", mark{10, "a"}, true, mark{10, "a"}, true, mark{14, "a"}, mark{14, "a"}},
		{"an append landed during the read: kept", mark{11, "a"}, true, mark{10, "a"}, true, mark{10, "a"}, mark{11, "a"}},
		{"first sight during an append: kept", mark{11, "a"}, true, mark{}, false, mark{10, "a"}, mark{11, "a"}},
		{"an append landed during the read, of an erased log: replaced", mark{11, "a"}, true, mark{10, "a"}, true, mark{3, "b"}, mark{3, "b"}},
		{"nothing cached: taken", mark{}, false, mark{}, false, mark{7, "a"}, mark{7, "a"}},
	}
	for _, c := range cases {
		l := New(nil, "t")
		if c.hadCached {
			l.tips["s"] = c.cached
		}
		l.observeTip("s", c.read, c.before, c.hadBefore)
		if got := l.tips["s"]; got != c.want {
			t.Errorf("%s: cached tip %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestObserve: an append or a read that is not the log's end moves the cache forward
// within an epoch, and replaces it with a seq of another epoch.
func TestObserve(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		cached mark
		seq    int64
		epoch  string
		want   mark
	}{
		{"forward", mark{4, "a"}, 5, "a", mark{5, "a"}},
		{"not back", mark{4, "a"}, 2, "a", mark{4, "a"}},
		{"another epoch, lower", mark{9, "a"}, 1, "b", mark{1, "b"}},
		{"epoch learnt", mark{4, ""}, 5, "a", mark{5, "a"}},
		{"epoch not known: kept", mark{4, "a"}, 5, "", mark{5, "a"}},
	} {
		l := New(nil, "t")
		l.tips["s"] = c.cached
		l.observe("s", c.seq, c.epoch)
		if got := l.tips["s"]; got != c.want {
			t.Errorf("%s: cached tip %+v, want %+v", c.name, got, c.want)
		}
	}
}
