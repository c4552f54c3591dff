package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/devstate"
)

// findDev is how every client command finds the running `terret dev` it talks to: the
// one at addr (HOST:PORT, a port, or its ws:// URL) or, with addr "", the only one
// running. When several run and addr does not choose, the error lists them and names
// choose, the flags that pick one (for example "--addr or --url").
func findDev(env config.CLIEnv, addr, choose string) (devState, error) {
	r, err := devstate.Find(env.StateDir, addr)
	var amb *devstate.AmbiguousError
	switch {
	case err == nil:
		return r, nil
	case errors.As(err, &amb):
		var b strings.Builder
		fmt.Fprintf(&b, "%d terret dev instances are running; choose one with %s:", len(amb.Running), choose)
		for _, r := range amb.Running {
			data := ""
			if r.DataDir != "" {
				data = ", data " + r.DataDir
			}
			fmt.Fprintf(&b, "\n  --addr %s   (%s, pid %d, DynamoDB %s%s)", r.Addr, r.WSURL, r.PID, r.DynamoDBEndpoint, data)
		}
		return devState{}, fmt.Errorf("%w: %s", errUsage, b.String())
	case errors.Is(err, devstate.ErrNoMatch):
		running, _ := devstate.List(env.StateDir)
		addrs := make([]string, len(running))
		for i, r := range running {
			addrs[i] = r.Addr
		}
		if len(addrs) == 0 {
			return devState{}, fmt.Errorf("no terret dev is running at %s (none is running)", addr)
		}
		return devState{}, fmt.Errorf("no terret dev is running at %s (running: %s)", addr, strings.Join(addrs, ", "))
	case errors.Is(err, devstate.ErrNone):
		return devState{}, errNoDev
	default:
		return devState{}, err
	}
}
