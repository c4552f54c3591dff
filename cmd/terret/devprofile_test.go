package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevProfileRefusedBeforeStart: a --profile that cannot be served stops `terret
// dev` before it starts anything, in process and with --lambda-emulator: exit 1 and a
// message naming the flag, the file and, for a profile that does not pass, each
// problem at its JSON path. The DynamoDB endpoint given answers nothing, and
// --lambda-emulator would first build the functions: a message about either would
// mean the profile was read too late. A profile that passes in process but not as the
// emulated functions run it (as AWS Lambda does) is refused with the emulator only.
func TestDevProfileRefusedBeforeStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "broken.json"), `{"system": "S",`)
	writeFile(t, filepath.Join(dir, "nokey.json"), `{"models": {"main": "acme/m"},
	  "providers": {"acme": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "TERRET_TEST_UNSET_KEY"}}}`)
	writeFile(t, filepath.Join(dir, "command.json"), `{"tools": [{"name": "lookup", "kind": "mcp", "spec": {"command": ["/bin/true"]}}]}`)
	writeFile(t, filepath.Join(dir, "rule.json"), `{"rules": [{"tool": "*", "when": "args.path ==", "effect": "deny"}]}`)
	const ruleProblem = "rule.json: rules[0].when: column 13: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
	tests := []struct {
		name string
		args []string
		want string // the whole message, after "terret dev: "; "" for a start
	}{
		{"missing file", []string{"--profile", "missing.json"},
			"--profile missing.json: cannot read the profile: no such file or directory"},
		{"missing file, emulated", []string{"--lambda-emulator", "--profile", "missing.json"},
			"--profile missing.json: cannot read the profile: no such file or directory"},
		{"a directory", []string{"--profile", "."},
			"--profile .: cannot read the profile: is a directory"},
		{"not JSON, emulated", []string{"--lambda-emulator", "--profile", "broken.json"},
			"--profile broken.json: invalid profile:\nbroken.json: not a JSON object: invalid JSON at byte 15: unexpected end of JSON input"},
		{"key not set", []string{"--profile", "nokey.json"},
			"--profile nokey.json: invalid profile:\nnokey.json: providers.acme.api_key_env: environment variable TERRET_TEST_UNSET_KEY is not set (locally it may also be in .env in the working directory)"},
		{"key not set, emulated", []string{"--lambda-emulator", "--profile", "nokey.json"},
			"--profile nokey.json: invalid profile:\nnokey.json: providers.acme.api_key_env: environment variable TERRET_TEST_UNSET_KEY is not set (locally it may also be in .env in the working directory)"},
		{"rule does not compile", []string{"--profile", "rule.json"},
			"--profile rule.json: invalid profile:\n" + ruleProblem},
		{"rule does not compile, emulated", []string{"--lambda-emulator", "--profile", "rule.json"},
			"--profile rule.json: invalid profile:\n" + ruleProblem},
		{"command MCP server, emulated", []string{"--lambda-emulator", "--profile", "command.json"},
			"--profile command.json: invalid profile for --lambda-emulator (the functions run it as AWS Lambda does: no command MCP servers, no api_key_secret):\n" +
				"command.json: tools[0].spec.command: a command MCP server cannot run in AWS Lambda (no such program there); serve it over streamable HTTP and give spec.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"dev", "--addr", "127.0.0.1:0", "--dynamodb-endpoint", "http://127.0.0.1:1"}, tt.args...)
			cmd := exec.Command(terretBin(t), args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("terret %s: %v, want exit 1\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
			// The start's first step line, then the refusal; nothing after it.
			step := "terret dev: reading the profile " + tt.args[len(tt.args)-1] + "\n"
			if got, want := stderr.String(), step+"terret dev: "+tt.want+"\n"; got != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing: the stack must not start", stdout.String())
			}
		})
	}
}
