package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/protocol"
)

// runSend posts one control frame to an agent over HTTP (POST /agents/{agent_id}/frames,
// docs/protocol.md "HTTP"), against the running terret dev or a deployed URL with a
// token, and prints the client_id it was sent with. The frame is the JSON argument
// ("-": read from stdin), exactly as on the socket. --idempotency-key names the frame:
// sending it again with the same key appends nothing. Exit 0: accepted (202); 1: the
// server refused it (its code and message on stderr) or could not be reached; 2: bad
// input.
func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret send --agent ID '<frame JSON>' [--idempotency-key K] [flags]")
	tf := addTargetFlags(fs, env)
	key := fs.String("idempotency-key", "", "the frame's client_id, 1-128 characters (default: the frame's client_id, else a new one)")
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if err == flag.ErrHelp {
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) == 0:
		return fmt.Errorf("%w: the frame is required: terret send --agent ID '{\"type\":\"inject\",\"text\":\"hi\",\"wake\":true}'", errUsage)
	case len(pos) > 1:
		return fmt.Errorf("%w: unexpected argument %q (one frame per call; quote the frame's JSON)", errUsage, pos[1])
	}
	frame := []byte(pos[0])
	if pos[0] == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, protocol.MaxFrameBytes+1))
		if err != nil {
			return fmt.Errorf("read the frame from stdin: %w", err)
		}
		frame = b
	}
	if len(frame) > protocol.MaxFrameBytes {
		return fmt.Errorf("%w: the frame is over %d bytes", errUsage, protocol.MaxFrameBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(frame, &obj); err != nil {
		return fmt.Errorf("%w: the frame argument is not a JSON object: %v", errUsage, err)
	}
	if *key != "" {
		if p := protocol.ValidClientID(*key); p != "" {
			return fmt.Errorf("%w: --idempotency-key %s", errUsage, p)
		}
	}
	tgt, err := tf.resolve(ctx, env)
	if err != nil {
		return err
	}
	id, err := client.SendFrame(ctx, tgt.url, tgt.agent, tgt.token, frame, client.SendOptions{IdempotencyKey: *key})
	var pe *client.ProtocolError
	switch {
	case errors.Is(err, client.ErrBadURL):
		return fmt.Errorf("%w: %v", errUsage, err)
	case errors.As(err, &pe) && pe.Code == client.CodeUnauthorized:
		return explainEnd(err, tgt)
	case errors.As(err, &pe):
		return fmt.Errorf("refused: %s", strings.TrimSpace(pe.Error()))
	case err != nil:
		return err
	}
	fmt.Fprintln(stdout, id)
	return nil
}
