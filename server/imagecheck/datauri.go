package imagecheck

import (
	"strconv"
	"strings"

	"github.com/flexway/flexway/server/faults"
)

// imageMediaType reports whether mt is an accepted image media type, in
// any case (media types are case-insensitive, RFC 9110 §8.3.1): PNG, JPEG
// (with the common non-standard alias image/jpg), GIF and WebP, the formats
// vision models accept. Any other type, image/* included (image/svg+xml,
// image/heic, image/bmp…), is refused: the gateway forwards only what an
// upstream can take.
func imageMediaType(mt string) bool {
	if len(mt) > len("image/webp") {
		return false
	}
	switch strings.ToLower(mt) {
	case "image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp":
		return true
	}
	return false
}

// checkDataURI checks the rest of a data: URI, after "data:":
//
//	<media type>[;<name>=<value>]*;base64,<base64 data>
//
// The base64 is the standard alphabet (RFC 4648 §4) with its padding,
// unbroken: whitespace and line breaks are refused, as is the URL-safe
// alphabet. Checks run cheapest first: the allowance, the header, the
// length (a multiple of 4), the decoded size against the limit, then one
// pass over the data. An image over the limit is therefore refused for its
// size (413) even when its base64 is also broken.
func (c *Checker) checkDataURI(rest string) *refusal {
	if !c.allowDataURIs {
		return invalid("data: URI images are not accepted by this gateway; send an https image URL from an allowed origin")
	}
	comma := strings.IndexByte(rest, ',')
	if comma < 0 {
		return invalid("a data: URI needs a comma before its data")
	}
	header, data := rest[:comma], rest[comma+1:]
	params, ok := strings.CutSuffix(header, ";base64")
	if !ok {
		return invalid("only base64 data: URIs are accepted for images (data:<image type>;base64,<data>)")
	}
	mt, params, _ := strings.Cut(params, ";")
	if !imageMediaType(mt) {
		return invalid("media type %q is not an accepted image type; use image/png, image/jpeg, image/gif or image/webp", clip(mt))
	}
	if params != "" && !validParams(params) {
		return invalid("the data: URI has a malformed parameter; parameters are name=value")
	}
	n := len(data)
	if n == 0 {
		return invalid("the data: URI holds no image data")
	}
	if n%4 != 0 {
		// Say why when a byte explains it (a line break, the URL-safe
		// alphabet): this costs a pass, but only on a refusal.
		if off := invalidBase64(strings.TrimRight(data, "=")); off >= 0 {
			return base64Refusal(data, off)
		}
		return invalid("the base64 data is %d characters long, not a multiple of 4: it is truncated or unpadded", n)
	}
	pad := 0
	if data[n-1] == '=' {
		pad++
		if data[n-2] == '=' {
			pad++
		}
	}
	if size := int64(n/4)*3 - int64(pad); size > c.maxImageBytes {
		return &refusal{reason: faults.RequestTooLarge, msg: sizeMessage(size, c.maxImageBytes)}
	}
	if off := invalidBase64(data[:n-pad]); off >= 0 {
		return base64Refusal(data, off)
	}
	return nil
}

// sizeMessage says by how much an image is over the limit.
func sizeMessage(size, limit int64) string {
	return "the image is " + strconv.FormatInt(size, 10) + " bytes decoded, over the limit of " + strconv.FormatInt(limit, 10) + " bytes"
}

// base64Refusal describes the bad byte at data[off].
func base64Refusal(data string, off int) *refusal {
	switch b := data[off]; {
	case b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v':
		return invalid("the base64 data contains whitespace or a line break at character %d; send it unbroken", off)
	case b == '-' || b == '_':
		return invalid("the base64 data uses the URL-safe alphabet (%q at character %d); use the standard alphabet", b, off)
	case b == '=':
		return invalid("the base64 data has padding ('=') at character %d, before its end", off)
	case b < 0x20 || b >= 0x7f:
		return invalid("the base64 data contains byte 0x%02x at character %d, outside the base64 alphabet", b, off)
	default:
		return invalid("the base64 data contains %q at character %d, outside the base64 alphabet", b, off)
	}
}

// validParams reports whether params (the text between the media type and
// ";base64", without its leading ';') is ;-separated name=value pairs of
// RFC 9110 token characters.
func validParams(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		name, value, ok := strings.Cut(p, "=")
		if !ok || !isToken(name) || !isToken(value) {
			return false
		}
	}
	return true
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// tchar marks RFC 9110 token characters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// notB64 is 0 for the standard base64 alphabet and 1 for every other byte.
var notB64 = func() (t [256]byte) {
	for i := range t {
		t[i] = 1
	}
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = 0
	}
	return t
}()

// invalidBase64 returns the offset of the first byte of s outside the
// standard base64 alphabet, or -1. It makes one branch-free pass, 32 bytes
// at a time, and locates the byte only when there is one; it
// allocates nothing.
func invalidBase64(s string) int {
	var bad byte
	i := 0
	for ; i+32 <= len(s); i += 32 {
		b := s[i : i+32]
		bad |= notB64[b[0]] | notB64[b[1]] | notB64[b[2]] | notB64[b[3]] |
			notB64[b[4]] | notB64[b[5]] | notB64[b[6]] | notB64[b[7]] |
			notB64[b[8]] | notB64[b[9]] | notB64[b[10]] | notB64[b[11]] |
			notB64[b[12]] | notB64[b[13]] | notB64[b[14]] | notB64[b[15]] |
			notB64[b[16]] | notB64[b[17]] | notB64[b[18]] | notB64[b[19]] |
			notB64[b[20]] | notB64[b[21]] | notB64[b[22]] | notB64[b[23]] |
			notB64[b[24]] | notB64[b[25]] | notB64[b[26]] | notB64[b[27]] |
			notB64[b[28]] | notB64[b[29]] | notB64[b[30]] | notB64[b[31]]
	}
	for ; i < len(s); i++ {
		bad |= notB64[s[i]]
	}
	if bad == 0 {
		return -1
	}
	for i := 0; i < len(s); i++ {
		if notB64[s[i]] != 0 {
			return i
		}
	}
	return -1
}
