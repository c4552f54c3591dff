// Command orders is a small MCP server: one tool, lookup_order, which tells an order's
// status from a fixed table. It speaks JSON-RPC 2.0 with the standard library alone, so
// every message an MCP client exchanges with a server is in this file:
//
//   - server/discover: the client's first call (the stateless handshake of newer MCP
//     versions). Answering "method not found" (-32601) makes the client fall back to
//     initialize.
//   - initialize: answered with the protocol version the client asked for, the server's
//     name and its capabilities ({"tools":{}}: it has tools).
//   - notifications/initialized: a notification (no id), never answered.
//   - tools/list: every tool with its name, description and JSON Schema of arguments.
//   - tools/call: runs one tool; a failure the model should read is a result with
//     "isError": true, not a JSON-RPC error.
//   - ping: answered with an empty result.
//
// By default it serves stdio, one JSON message per line (what a profile's spec.command
// starts). With -http ADDR it serves the same over streamable HTTP at ADDR's /mcp (a
// profile's spec.url; how MCP tools run on AWS): each POST carries one message and is
// answered with one JSON response, or 202 for a notification.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
)

// orders is the table the tool reads.
var orders = map[string]string{
	"1042": "shipped on 2026-12-01 with DHL, tracking 00340434161094042557",
	"1043": "paid, packed, waiting for the carrier",
	"1044": "cancelled by the customer on 2026-11-30",
}

// request is a JSON-RPC 2.0 request or notification (a notification has no id).
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

var lookupOrder = map[string]any{
	"name":        "lookup_order",
	"description": "The status of an ACME order, by its number.",
	"inputSchema": map[string]any{
		"type": "object",
		"properties": map[string]any{
			"order_id": map[string]any{"type": "string", "description": "the order number, e.g. 1042"},
		},
		"required": []string{"order_id"},
	},
}

// handle answers one message; ok is false for a notification, which gets no answer.
func handle(req request) (resp response, ok bool) {
	if len(req.ID) == 0 {
		return response{}, false // notifications/initialized, notifications/cancelled, …
	}
	resp = response{JSONRPC: "2.0", ID: req.ID}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(req.Params, &p)
		resp.Result = map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "orders", "version": "1.0.0"},
		}
	case "ping":
		resp.Result = map[string]any{}
	case "tools/list":
		resp.Result = map[string]any{"tools": []any{lookupOrder}}
	case "tools/call":
		var p struct {
			Name      string `json:"name"`
			Arguments struct {
				OrderID string `json:"order_id"`
			} `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Name != "lookup_order" {
			resp.Error = &rpcError{Code: -32602, Message: "unknown tool or bad arguments"}
			break
		}
		id := strings.TrimPrefix(strings.TrimSpace(p.Arguments.OrderID), "#")
		status, found := orders[id]
		text := fmt.Sprintf("order %s: %s", id, status)
		if !found {
			text = fmt.Sprintf("no order %q", id)
		}
		log.Printf("lookup_order %q", id) // stderr: the console of terret dev
		resp.Result = map[string]any{
			"content": []any{map[string]any{"type": "text", "text": text}},
			"isError": !found,
		}
	default: // server/discover included
		resp.Error = &rpcError{Code: -32601, Message: "method not found: " + req.Method}
	}
	return resp, true
}

// serveStdio reads one message per line from r and writes each answer as one line to w.
func serveStdio(r io.Reader, w io.Writer) error {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 64<<10), 4<<20)
	enc := json.NewEncoder(w) // one line per message
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			enc.Encode(response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: -32700, Message: "parse error"}})
			continue
		}
		if resp, ok := handle(req); ok {
			if err := enc.Encode(resp); err != nil {
				return err
			}
		}
	}
	return in.Err()
}

// serveHTTP is the same over streamable HTTP: POST /mcp, one message per request.
func serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req request
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&req); err != nil {
		http.Error(w, "parse error", http.StatusBadRequest)
		return
	}
	resp, ok := handle(req)
	if !ok {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func main() {
	addr := flag.String("http", "", "serve streamable HTTP at `ADDR`/mcp instead of stdio (e.g. 127.0.0.1:8090)")
	flag.Parse()
	log.SetFlags(0) // terret dev's console shows each stderr line after "mcp orders: "
	if *addr != "" {
		http.HandleFunc("/mcp", serveHTTP)
		log.Printf("serving streamable HTTP at http://%s/mcp", *addr)
		log.Fatal(http.ListenAndServe(*addr, nil))
	}
	if err := serveStdio(os.Stdin, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
