package client

import "time"

// WithKeepaliveTimer returns o whose keepalive loop waits on after instead of time.After.
func WithKeepaliveTimer(o Options, after func(time.Duration) <-chan time.Time) Options {
	o.keepaliveAfter = after
	return o
}
