//go:build !unix

package upstream

import "net"

// peerOpen cannot peek on this platform; an idle connection the peer
// closed fails its next request.
func peerOpen(net.Conn) bool { return true }
