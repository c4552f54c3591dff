package stack

import (
	"path"
	"strings"
	"testing"
)

// TestDedupGrant: the message function may write and delete the dedup records of
// exactly-once frames ("dedup#<agent>#<client_id>" in the agents table, docs/
// architecture.md "Exactly-once frames"): PutItem (the claim, and the record inside an
// inject's transaction) and DeleteItem (a refused frame's claim released), on items the
// grant's LeadingKeys reach.
func TestDedupGrant(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	for _, f := range functions(t, s) {
		if f.LogicalID != "MessageFunction" {
			continue
		}
		reached := map[string]bool{}
		for _, g := range grants(t, f) {
			if g.Resource != "${AgentsTable.Arn}" {
				continue
			}
			tg := tableGrantOf(t, f.LogicalID, "AgentsTable", g)
			if !reaches(tg.Prefixes, "dedup#a1#c-1") || len(tg.Attributes) > 0 {
				continue
			}
			for _, a := range tg.Actions {
				reached[a] = true
			}
		}
		for _, a := range []string{"dynamodb:PutItem", "dynamodb:DeleteItem"} {
			if !reached[a] {
				t.Errorf("MessageFunction: no %s on the agents table's dedup# items", a)
			}
		}
		return
	}
	t.Fatal("no MessageFunction")
}

// reaches reports whether a grant limited to prefixes (LeadingKeys patterns; nil: every
// item) reaches the item with partition key pk.
func reaches(prefixes []string, pk string) bool {
	if prefixes == nil {
		return true
	}
	for _, p := range prefixes {
		if ok, _ := path.Match(strings.ReplaceAll(p, "/", "?"), pk); ok {
			return true
		}
	}
	return false
}
