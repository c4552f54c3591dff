package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/config"
)

// TestTargetToken: the token comes from --token, else --token-file's first line, else
// TERRET_TOKEN; a bad file or both flags is an error naming the flag.
func TestTargetToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, empty := write("good", "tt_file\nignored\n"), write("empty", " \n")
	env := config.CLIEnv{Token: "tt_env"}
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "flag", args: []string{"--token", "tt_flag"}, want: "tt_flag"},
		{name: "file", args: []string{"--token-file", good}, want: "tt_file"},
		{name: "environment", want: "tt_env"},
		{name: "both flags", args: []string{"--token", "x", "--token-file", good}, wantErr: "--token and --token-file are exclusive"},
		{name: "empty file", args: []string{"--token-file", empty}, wantErr: "--token-file " + empty + ": holds no token"},
		{name: "missing file", args: []string{"--token-file", filepath.Join(dir, "nope")}, wantErr: "--token-file: open " + filepath.Join(dir, "nope")},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		tf := addTargetFlags(fs, env)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := tf.bearer(env)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestTargetHelpHidesToken: -h of tail and chat names TERRET_TOKEN and --token-file
// but never prints the token the environment holds.
func TestTargetHelpHidesToken(t *testing.T) {
	const secret = "tt_secret_from_the_environment"
	t.Setenv("TERRET_TOKEN", secret)
	for name, run := range map[string]func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error{
		"tail": func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return runTail(ctx, a, o, e) },
		"chat": func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return runChat(ctx, a, o, e) },
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", name, err)
		}
		help := stdout.String() + stderr.String()
		if strings.Contains(help, secret) || !strings.Contains(help, "TERRET_TOKEN") || !strings.Contains(help, "-token-file") {
			t.Errorf("%s -h:\n%s", name, help)
		}
	}
}
