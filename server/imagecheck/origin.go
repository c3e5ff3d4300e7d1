package imagecheck

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// origin is an allowed origin, normalised: a lower-case ASCII host and an
// explicit port (443 when the configuration gave none). The scheme is
// always https.
type origin struct {
	host, port string
}

// defaultPort is https's port, made explicit for comparison.
const defaultPort = "443"

// allowed reports whether o is one of c's origins.
func (c *Checker) allowed(o origin) bool {
	for _, a := range c.origins {
		if a == o {
			return true
		}
	}
	return false
}

// parseOrigin parses a configured origin: "https://host[:port]", nothing
// more. The host is lower-cased; an IDN must be written in its punycode
// (xn--) form.
func parseOrigin(s string) (origin, error) {
	rest, ok := strings.CutPrefix(s, "https://")
	switch {
	case !ok:
		return origin{}, errors.New("an allowed image origin must be https://host[:port]")
	case strings.ContainsAny(rest, "/?#"):
		return origin{}, errors.New("an origin has no path, query or fragment (not even a trailing /): https://host[:port]")
	case strings.Contains(rest, "@"):
		return origin{}, errors.New("an origin carries no userinfo")
	case strings.Contains(rest, "%"):
		return origin{}, errors.New("an origin's host is not percent-encoded")
	case strings.ContainsAny(rest, "[]"):
		return origin{}, errors.New("IPv6 literal hosts are not supported")
	}
	for i := 0; i < len(rest); i++ {
		if b := rest[i]; b <= ' ' || b >= 0x7f || b == '\\' {
			return origin{}, errors.New("an origin is printable ASCII without spaces or backslashes; write an IDN host in its punycode (xn--) form")
		}
	}
	host, port, hasPort := strings.Cut(rest, ":")
	host = strings.ToLower(host)
	if msg := hostProblem(host); msg != "" {
		return origin{}, errors.New(msg)
	}
	if !hasPort {
		port = defaultPort
	} else if !validPort(port) {
		return origin{}, fmt.Errorf("port %q is not a number from 1 to 65535 without leading zeros", port)
	}
	// Cross-check with net/url: both parsers must see the same origin.
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.User != nil || !strings.EqualFold(u.Hostname(), host) || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return origin{}, errors.New("not a well-formed https://host[:port] origin")
	}
	return origin{host: host, port: port}, nil
}

// checkRemote checks an https image URL: printable ASCII only, no
// backslash, no userinfo, a host spelled exactly as an allowed origin's
// (lower-case, no trailing dot, no percent-encoding), a port that is the
// allowed origin's (443 whether written or not), and well-formed
// percent-escapes in the rest. Nothing is lower-cased or otherwise
// repaired: a URL that differs from an allowed origin in any way is
// refused, never normalised into one.
func (c *Checker) checkRemote(s string) *refusal {
	if len(c.origins) == 0 {
		if c.allowDataURIs {
			return invalid("remote image URLs are not accepted by this gateway; send the image as a base64 data: URI")
		}
		return invalid("remote image URLs are not accepted by this gateway")
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b <= ' ' || b == 0x7f:
			return invalid("the image URL contains whitespace or a control character at byte %d", i)
		case b >= 0x80:
			return invalid("the image URL contains a non-ASCII byte at byte %d; hosts are accepted only as configured", i)
		case b == '\\':
			return invalid("the image URL contains a backslash at byte %d", i)
		}
	}
	rest := s[len("https://"):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	switch {
	case strings.Contains(auth, "@"):
		return invalid("image URLs must not carry userinfo (user@ or user:password@)")
	case strings.Contains(auth, "%"):
		return invalid("the image URL's host must not be percent-encoded")
	case strings.ContainsAny(auth, "[]"):
		return invalid("the image URL's host is an IPv6 literal, which is not an allowed image origin")
	}
	host, port, hasPort := strings.Cut(auth, ":")
	if msg := hostProblem(host); msg != "" {
		return invalid("the image URL's host: %s", msg)
	}
	if !hasPort {
		port = defaultPort
	} else if !validPort(port) {
		return invalid("the image URL's port %q is not a number from 1 to 65535 without leading zeros", clip(port))
	}
	if !c.allowed(origin{host: host, port: port}) {
		return invalid("the image URL's origin https://%s is not an allowed image origin", clip(auth))
	}
	if !validEscapes(tail) {
		return invalid("the image URL has a malformed percent-escape")
	}
	// Cross-check the origin with net/url (on scheme and authority only,
	// so that nothing proportional to the URL is allocated): both parsers
	// must see the same host and port, and no userinfo.
	u, err := url.Parse(s[:len("https://")+end])
	if err != nil || u.Scheme != "https" || u.User != nil || u.Opaque != "" || u.Host != auth || u.Hostname() != host {
		return invalid("the image URL is not a well-formed https URL")
	}
	return nil
}

// hostProblem says what is wrong with a host, or "" when it is a
// lower-case ASCII DNS name or IPv4 address: labels of a-z, 0-9 and '-',
// separated by single dots, no trailing dot. Upper case is refused, not
// folded: DNS would resolve IMAGES.example.com like images.example.com,
// but a host spelled other than as configured is a trick, not a client's
// mistake.
func hostProblem(host string) string {
	switch {
	case host == "":
		return "the host is empty"
	case host[len(host)-1] == '.':
		return "the host has a trailing dot"
	case host[0] == '.' || strings.Contains(host, ".."):
		return "the host has an empty label"
	}
	for i := 0; i < len(host); i++ {
		switch b := host[i]; {
		case b >= 'a' && b <= 'z', b >= '0' && b <= '9', b == '-', b == '.':
		case b >= 'A' && b <= 'Z':
			return "the host must be lower-case, spelled exactly as the allowed origin"
		default:
			return fmt.Sprintf("the host contains %q; only a-z, 0-9, '-' and '.' are accepted", b)
		}
	}
	return ""
}

// validPort reports whether p is a decimal port from 1 to 65535 without a
// leading zero.
func validPort(p string) bool {
	if p == "" || len(p) > 5 || p[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// validEscapes reports whether every '%' in s starts a two-hex-digit
// escape.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return false
		}
		i += 2
	}
	return true
}

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}
