// Package ownagent holds the test of the example beside it: an agent of one's own with
// a stdio MCP server (orders) and, when no key is at hand, an OpenAI-compatible model
// server that needs none (fakemodel). README.md says how to run it; TestExample runs
// exactly that.
package ownagent
