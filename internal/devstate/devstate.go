// Package devstate keeps one record per running `terret dev` under the state directory
// (STATE/dev/PID.json), so that several instances coexist and client commands can find
// the one they mean. An instance writes its record once it is ready and removes only
// its own on exit; a record whose process is gone is stale, and List deletes it.
package devstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/terret/terret-ws/internal/privatefile"
	"github.com/terret/terret-ws/internal/tables"
)

// Record is what a running `terret dev` leaves for the other commands. Its first three
// fields are also the --ready-file's, as dev-profile.md names them.
type Record struct {
	WSURL            string       `json:"ws_url"`
	DynamoDBEndpoint string       `json:"dynamodb_endpoint"`
	Region           string       `json:"region"`
	Tables           tables.Names `json:"tables"`
	PID              int          `json:"pid"`
	Addr             string       `json:"addr,omitempty"`     // the gateway's bound HOST:PORT
	DataDir          string       `json:"data_dir,omitempty"` // "" in memory or an external endpoint
	// PageURL is the web page's address with the page key that /dev/token asks for
	// (webui.KeyFragment); "" when /dev/token is off.
	PageURL string `json:"page_url,omitempty"`
	// AccessKeyID and SecretAccessKey are what the DynamoDB Local this instance
	// started takes (its database opens only with them); "" for an endpoint given by
	// URL, which takes the fixed local credentials. The record file is 0600.
	AccessKeyID     string `json:"aws_access_key_id,omitempty"`
	SecretAccessKey string `json:"aws_secret_access_key,omitempty"`
}

// Errors of Find.
var (
	ErrNone      = errors.New("devstate: no running terret dev")
	ErrNoMatch   = errors.New("devstate: no running terret dev at that address")
	ErrAmbiguous = errors.New("devstate: several terret dev instances are running")
)

// AmbiguousError is Find's answer when more than one instance could be meant.
type AmbiguousError struct{ Running []Record }

func (e *AmbiguousError) Error() string { return ErrAmbiguous.Error() }
func (e *AmbiguousError) Unwrap() error { return ErrAmbiguous }

// Dir is where the records live under stateDir.
func Dir(stateDir string) string { return filepath.Join(stateDir, "dev") }

func path(stateDir string, pid int) string {
	return filepath.Join(Dir(stateDir), strconv.Itoa(pid)+".json")
}

// Write stores r as the record of process r.PID (atomically: readers never see half a
// record; in a directory only this user can write, mode 0600: it holds keys) and returns the function that removes it, which removes nothing once
// another process has taken the file over (a recycled pid).
func Write(stateDir string, r Record) (remove func(), err error) {
	if err := privatefile.MkdirAll(Dir(stateDir)); err != nil {
		return nil, fmt.Errorf("devstate: write record: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("devstate: write record: %w", err)
	}
	p := path(stateDir, r.PID)
	if err := privatefile.Write(p, b); err != nil {
		return nil, fmt.Errorf("devstate: write record: %w", err)
	}
	return func() {
		if cur, err := read(p); err == nil && cur.PID == r.PID && cur.WSURL == r.WSURL {
			_ = os.Remove(p)
		}
	}, nil
}

// List returns the records of the live instances, ordered by address, and deletes the
// records of processes that are gone.
func List(stateDir string) ([]Record, error) {
	entries, err := os.ReadDir(Dir(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("devstate: list %s: %w", Dir(stateDir), err)
	}
	var out []Record
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".json"))
		if err != nil || !strings.HasSuffix(e.Name(), ".json") || pid <= 0 {
			continue
		}
		p := filepath.Join(Dir(stateDir), e.Name())
		if !alive(pid) {
			_ = os.Remove(p)
			continue
		}
		r, err := read(p)
		if err != nil || r.PID != pid {
			continue // being written, or not ours to judge
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Addr < out[j].Addr || out[i].Addr == out[j].Addr && out[i].PID < out[j].PID
	})
	return out, nil
}

// Find returns the one live instance meant: the one listening at addr (HOST:PORT, or a
// port alone, or a ws:// URL of it), or, with addr "", the only one running. It
// returns ErrNone, ErrNoMatch, or an *AmbiguousError listing the candidates.
func Find(stateDir, addr string) (Record, error) {
	all, err := List(stateDir)
	if err != nil {
		return Record{}, err
	}
	if addr == "" {
		switch len(all) {
		case 0:
			return Record{}, ErrNone
		case 1:
			return all[0], nil
		}
		return Record{}, &AmbiguousError{Running: all}
	}
	var hits []Record
	for _, r := range all {
		if Matches(r, addr) {
			hits = append(hits, r)
		}
	}
	switch len(hits) {
	case 0:
		return Record{}, fmt.Errorf("%w %s", ErrNoMatch, addr)
	case 1:
		return hits[0], nil
	}
	return Record{}, &AmbiguousError{Running: hits}
}

// Matches reports whether r listens at addr: HOST:PORT (localhost, 127.0.0.1 and an
// empty host are the same machine), a port alone, or a ws:// or http:// URL.
func Matches(r Record, addr string) bool {
	if u, err := url.Parse(addr); err == nil && u.Host != "" && (u.Scheme == "ws" || u.Scheme == "wss" || u.Scheme == "http" || u.Scheme == "https") {
		addr = u.Host
	}
	own := r.Addr
	if own == "" {
		if u, err := url.Parse(r.WSURL); err == nil {
			own = u.Host
		}
	}
	ownHost, ownPort, err := net.SplitHostPort(own)
	if err != nil {
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = "", addr // a port alone
	}
	if port != ownPort {
		return false
	}
	local := func(h string) bool { return h == "" || h == "localhost" || net.ParseIP(h).IsLoopback() }
	return host == ownHost || local(host) && local(ownHost)
}

// read returns the record at p, which must be this user's own private file: a record
// another user could have written would point the commands at their server.
func read(p string) (Record, error) {
	b, err := privatefile.Read(p)
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// alive reports whether process pid exists (EPERM: it does, as another user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
