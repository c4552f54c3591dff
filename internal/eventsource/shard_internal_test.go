package eventsource

import (
	"slices"
	"testing"
)

func TestParentsFirst(t *testing.T) {
	tests := []struct {
		name   string
		shards [][2]string // id, parent
		want   []string
	}{
		{"already ordered", [][2]string{{"a", ""}, {"b", "a"}}, []string{"a", "b"}},
		{"child listed first", [][2]string{{"c", "b"}, {"b", "a"}, {"a", ""}}, []string{"a", "b", "c"}},
		{"parent outside the set", [][2]string{{"b", "gone"}, {"c", "b"}}, []string{"b", "c"}},
		{"two children of one parent", [][2]string{{"x", "p"}, {"y", "p"}, {"p", ""}}, []string{"p", "x", "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ws []*shardWorker
			for _, s := range tt.shards {
				ws = append(ws, &shardWorker{shardID: s[0], parentID: s[1]})
			}
			var got []string
			for _, w := range parentsFirst(ws) {
				got = append(got, w.shardID)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
		})
	}
}
