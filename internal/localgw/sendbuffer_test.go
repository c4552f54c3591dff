package localgw

import (
	"net"
	"runtime"
	"syscall"
	"testing"
)

// TestSendBufferListener: every connection the gateway accepts has the kernel send
// buffer Config.SendBuffer asks for (Linux reports twice the size set, its bookkeeping
// included), not one the kernel grows to megabytes on its own, where frames would wait
// for a slow reader unseen by the outbound-queue bound.
func TestSendBufferListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the reported size is Linux's")
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := sendBufferListener{Listener: inner, size: DefaultSendBuffer}
	defer ln.Close()
	dialed := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err == nil {
			defer c.Close()
		}
		dialed <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var serr error
	if err := raw.Control(func(fd uintptr) { got, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	if want := 2 * DefaultSendBuffer; got != want {
		t.Fatalf("SO_SNDBUF %d, want %d", got, want)
	}
}
