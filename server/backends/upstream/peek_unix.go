//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// peerOpen reports whether an idle connection is still usable: not closed
// by the peer and with no unexpected bytes waiting. It peeks without
// blocking (recv with MSG_PEEK|MSG_DONTWAIT): one system call.
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK:
			// Nothing to read: open and idle.
		default:
			// An error, the peer's FIN (n == 0), or bytes nobody asked for.
			open = false
		}
		_ = n
		return true // never wait for readiness
	})
	return err == nil && open
}
