package dynamotest

import (
	"testing"
)

// namedTB is a top-level test of a given name whose cleanups run when end is called.
type namedTB struct {
	testing.TB
	name     string
	cleanups []func()
}

func (n *namedTB) Name() string     { return n.name }
func (n *namedTB) Cleanup(f func()) { n.cleanups = append(n.cleanups, f) }
func (n *namedTB) end() {
	for _, f := range n.cleanups {
		f()
	}
}

// TestPick: a test keeps its endpoint for every call (its subtests too); a new test
// gets an endpoint no running test holds while there is one, and one freed by a test
// that ended.
func TestPick(t *testing.T) {
	mu.Lock()
	assigned, running = map[string]int{}, nil
	mu.Unlock()
	eps := []string{"a", "b", "c"}
	long := &namedTB{TB: t, name: "TestLong"}
	first := pick(long, eps)
	if again := pick(&namedTB{TB: t, name: "TestLong/sub"}, eps); again != first {
		t.Fatalf("a subtest got %s, its test %s", again, first)
	}
	second := &namedTB{TB: t, name: "TestSecond"}
	third := &namedTB{TB: t, name: "TestThird"}
	got := map[string]bool{first: true, pick(second, eps): true, pick(third, eps): true}
	if len(got) != 3 {
		t.Fatalf("three running tests share endpoints: %v", got)
	}
	second.end()
	freed := assigned["TestSecond"]
	if next := pick(&namedTB{TB: t, name: "TestFourth"}, eps); next != eps[freed] {
		t.Fatalf("a test started while only %s was free got %s", eps[freed], next)
	}
	if pick(long, eps) != first {
		t.Fatal("a test's endpoint changed")
	}
}
