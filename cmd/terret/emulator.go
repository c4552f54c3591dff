package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/terret/terret-ws/internal/devstack"
)

// lambdaEmulator is the devstack option of `terret dev --lambda-emulator`: the built
// bootstraps under aws-lambda-rie, at most concurrency environments per function, each
// cold start announced on console. It is admitted only on a machine no other user logs
// in to, unless multiUser (--lambda-emulator-multi-user), which warns on warn instead.
func lambdaEmulator(on bool, concurrency int, console io.Writer, multiUser bool, warn io.Writer) *devstack.LambdaEmulator {
	if !on {
		return nil
	}
	return &devstack.LambdaEmulator{MaxEnvironments: concurrency, Console: console, Admit: func() error {
		return admitEmulator(passwdFile, loginDefsFile, os.Geteuid(), multiUser, warn)
	}}
}

// The account databases admitEmulator reads.
const (
	passwdFile    = "/etc/passwd"
	loginDefsFile = "/etc/login.defs"
)

// errSharedMachine: other users log in to this machine, and --lambda-emulator would
// open ports they can read.
var errSharedMachine = errors.New("--lambda-emulator refused: other users log in to this machine")

// admitEmulator returns errSharedMachine, naming the accounts, when passwd lists login
// accounts of other users. aws-lambda-rie serves each environment's Lambda Runtime API
// on a loopback TCP port with no access control (it has no option for one, and the
// bootstrap must reach it): any program on the machine can fetch the next invocation
// there — a socket's $connect with its bearer token, a stream batch, the invoke secret
// in the client context — and answer in the function's place. A loopback port cannot
// be closed to another user without root (a private network namespace, a firewall
// rule on the owner), so the emulator is for machines whose users are you (and root).
// With multiUser the emulator starts anyway and a warning names the accounts.
func admitEmulator(passwd, loginDefs string, self int, multiUser bool, warn io.Writer) error {
	others, err := otherLoginUsers(passwd, loginDefs, self)
	if err != nil {
		return fmt.Errorf("--lambda-emulator: cannot tell whether other users log in here: %w (--lambda-emulator-multi-user starts it anyway)", err)
	}
	if len(others) == 0 {
		return nil
	}
	if multiUser {
		fmt.Fprintf(warn, "terret dev: warning: --lambda-emulator-multi-user: %s can read the functions' Runtime API ports (every $connect token, stream batch and the invoke secret) and answer in their place\n", strings.Join(others, ", "))
		return nil
	}
	return fmt.Errorf("%w (%s): any of them could read the functions' Runtime API on its loopback ports — every $connect token, stream batch and the invoke secret — and answer in their place.\n"+
		"  Use the emulator on a machine of your own, or pass --lambda-emulator-multi-user if you trust every user here (docs/emulator.md)", errSharedMachine, strings.Join(others, ", "))
}

// otherLoginUsers returns the accounts of passwd, other than uid self, that a person
// can log in to: a uid from login.defs' UID_MIN (1000 when unset) up, not nobody
// (65534), with a shell that is not nologin or false. System accounts (below UID_MIN)
// run services, not people, and are not counted; accounts of a directory service
// (LDAP, SSSD) are not in passwd and not seen.
func otherLoginUsers(passwd, loginDefs string, self int) ([]string, error) {
	uidMin := 1000
	if b, err := os.ReadFile(loginDefs); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "UID_MIN" {
				if n, err := strconv.Atoi(f[1]); err == nil {
					uidMin = n
				}
			}
		}
	}
	f, err := os.Open(passwd)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) != 7 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		uid, err := strconv.Atoi(fields[2])
		shell := fields[6]
		base := shell[strings.LastIndexByte(shell, '/')+1:]
		if err != nil || uid == self || uid < uidMin || uid == 65534 || base == "nologin" || base == "false" {
			continue
		}
		out = append(out, fields[0])
	}
	return out, sc.Err()
}
