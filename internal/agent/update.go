package agent

import (
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// update is one UpdateItem of the state item, built by its parts: the actions of its
// clauses in the order they are added, its conditions (all must hold), and its values.
// The attribute names are not listed by hand: input maps every #name its expressions
// hold to the state attribute of that name (attrs.go), or to a map key named with Key,
// and leaves any other unnamed, so that DynamoDB refuses the write (a ValidationException
// naming the placeholder; nothing written) — a misspelled attribute fails the first test
// that writes it, and never panics a running function.
type update struct {
	c    clauses
	cond []string
	keys map[string]string // placeholder → map key (an inbox id)
	vals map[string]types.AttributeValue
}

func newUpdate() *update { return &update{vals: map[string]types.AttributeValue{}} }

// Set adds the action "#attr = expr": expr is a value placeholder (":me"), or an
// expression of them and of other attributes ("if_not_exists(#pending, :zero)").
func (u *update) Set(attr, expr string) *update {
	u.c.set = append(u.c.set, "#"+attr+" = "+expr)
	return u
}

// Remove adds the action removing each attr; an attr may be a path into a map whose
// key is named with Key (attrInbox+".#q").
func (u *update) Remove(attrs ...string) *update {
	for _, a := range attrs {
		u.c.remove = append(u.c.remove, "#"+a)
	}
	return u
}

// Add adds the action "ADD #attr ph", ph a number value placeholder.
func (u *update) Add(attr, ph string) *update {
	u.c.add = append(u.c.add, "#"+attr+" "+ph)
	return u
}

// If adds a condition the write needs; the write's condition is all of them.
func (u *update) If(cond string) *update {
	u.cond = append(u.cond, cond)
	return u
}

// Val gives the value placeholder ph its value.
func (u *update) Val(ph string, v types.AttributeValue) *update {
	u.vals[ph] = v
	return u
}

// Key names the placeholder ph ("#q") as the map key k.
func (u *update) Key(ph, k string) *update {
	if u.keys == nil {
		u.keys = map[string]string{}
	}
	u.keys[ph] = k
	return u
}

var placeholder = regexp.MustCompile(`#\w+`)

// input is the UpdateItem's expressions, names and values; the caller sets the table,
// the key and what the write returns (store.update sets the first two).
func (u *update) input() *dynamodb.UpdateItemInput {
	in := &dynamodb.UpdateItemInput{UpdateExpression: aws.String(u.c.String())}
	if len(u.cond) > 0 {
		in.ConditionExpression = aws.String(strings.Join(u.cond, " AND "))
	}
	names := map[string]string{}
	for _, e := range []*string{in.UpdateExpression, in.ConditionExpression} {
		for _, p := range placeholder.FindAllString(aws.ToString(e), -1) {
			if k, ok := u.keys[p]; ok {
				names[p] = k
				continue
			}
			if slices.Contains(stateAttrs, p[1:]) {
				names[p] = p[1:]
			}
		}
	}
	if len(names) > 0 {
		in.ExpressionAttributeNames = names
	}
	if len(u.vals) > 0 {
		in.ExpressionAttributeValues = u.vals
	}
	return in
}
