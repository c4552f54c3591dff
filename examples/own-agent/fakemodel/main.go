// Command fakemodel is a stand-in for an OpenAI-compatible model server, for trying an
// agent with no key and no network: POST /v1/chat/completions, the answer streamed as
// server-sent events in the chat-completions chunk format, as OpenAI, vLLM, Ollama and
// LiteLLM stream it. It does not think; it follows three rules, enough to drive a turn
// through a tool:
//
//   - the last message is a tool's result: it answers with that result in a sentence;
//   - the user's message names a number and a tool called lookup_order is offered: it
//     calls lookup_order with {"order_id": that number};
//   - anything else: it says what it can do.
//
// Every answer ends with a usage chunk, so `terret usage` counts tokens (one per word).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"regexp"
	"strings"
)

// request is the part of a chat-completions request the fake reads.
type request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"` // a string, or an array of parts
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// text is a message's content as plain text.
func text(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	}
	return ""
}

// toolText is the text of a tool result as terret sends it: {"text": …} for an MCP
// tool's text, {"error": …} for a failed call, other JSON as it is.
func toolText(content string) string {
	var r struct{ Text, Error string }
	if json.Unmarshal([]byte(content), &r) == nil && r.Text+r.Error != "" {
		return r.Text + r.Error
	}
	return content
}

var number = regexp.MustCompile(`[0-9]+`)

func (r request) offers(tool string) bool {
	for _, t := range r.Tools {
		if t.Function.Name == tool {
			return true
		}
	}
	return false
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"fakemodel serves POST /v1/chat/completions only"}}`, http.StatusNotFound)
		return
	}
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request: no messages"}}`, http.StatusBadRequest)
		return
	}
	last := req.Messages[len(req.Messages)-1]
	in := 0
	for _, m := range req.Messages {
		in += len(strings.Fields(text(m.Content)))
	}

	w.Header().Set("Content-Type", "text/event-stream")
	send := func(chunk map[string]any) {
		chunk["object"] = "chat.completion.chunk"
		chunk["model"] = req.Model
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	delta := func(d map[string]any, finish any) map[string]any {
		return map[string]any{"choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}}
	}
	end := func(finish string, out int) {
		send(delta(map[string]any{}, finish))
		send(map[string]any{"choices": []any{}, "usage": map[string]any{
			"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}})
		fmt.Fprint(w, "data: [DONE]\n\n")
	}

	id := number.FindString(text(last.Content))
	switch {
	case last.Role == "tool":
		answer := "The orders system says: " + toolText(text(last.Content)) + "."
		words := strings.SplitAfter(answer, " ")
		for _, word := range words { // one chunk per word, as a real model streams
			send(delta(map[string]any{"role": "assistant", "content": word}, nil))
		}
		end("stop", len(words))
	case last.Role == "user" && id != "" && req.offers("lookup_order"):
		args, _ := json.Marshal(map[string]string{"order_id": id})
		send(delta(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"index": 0, "id": "call_" + id, "type": "function",
			"function": map[string]any{"name": "lookup_order", "arguments": string(args)},
		}}}, nil))
		end("tool_calls", 1)
	default:
		answer := "I am fakemodel: name an order number (try: where is order 1042?) and I look it up with lookup_order."
		send(delta(map[string]any{"role": "assistant", "content": answer}, nil))
		end("stop", len(strings.Fields(answer)))
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "listen on `HOST:PORT`")
	flag.Parse()
	log.SetPrefix("fakemodel: ")
	log.SetFlags(0)
	http.HandleFunc("/", serve)
	log.Printf("an OpenAI-compatible model at http://%s/v1 (no key needed)", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
