// Package imagecheck checks the image parts of a chat request against the
// ai.vision policy (issue 5), before any upstream sees the request:
//
//   - A data: URI image (data:<media type>[;name=value]*;base64,<data>) is
//     measured without being decoded: its decoded size, computed from the
//     base64 length, must not exceed the policy's MaxImageBytes (413
//     request_too_large); its base64 is validated in one pass that
//     allocates nothing; its media type must be one of the accepted image
//     types; and data: URIs must be allowed at all.
//   - A remote image URL is accepted only when it is https and its origin
//     (scheme, host and port) is exactly one of the policy's
//     AllowedOrigins. The gateway never fetches it.
//
// What is strict, and why:
//
//   - Media types: image/png, image/jpeg (and its common alias image/jpg),
//     image/gif and image/webp, lower-case exactly; any other type, image/*
//     included (image/svg+xml, image/heic), is refused.
//   - Base64: the standard alphabet, padded to a multiple of 4, unbroken.
//     Whitespace and line breaks (MIME-style wrapping) and the URL-safe
//     alphabet are refused; OpenAI clients send unbroken standard base64.
//     Non-zero trailing bits before the padding are accepted, as
//     encoding/base64's StdEncoding accepts them.
//   - Hosts: compared with the configured one byte for byte, never
//     normalised. An upper-case letter, a trailing dot, a percent-escape,
//     userinfo, a backslash, whitespace, a control or a non-ASCII byte
//     anywhere in the URL is refused, even though DNS would resolve some of
//     them to an allowed host. An IDN is accepted only in the punycode
//     (xn--) form configured; a look-alike, Unicode or punycode, is
//     refused. The port must be the configured one; 443 matches whether
//     written or not.
//
// Every refusal is a [*faults.Error]: reason [faults.RequestTooLarge] (413)
// for an image over the limit, [faults.InvalidRequest] (400) otherwise,
// with Param naming the part in OpenAI's notation
// (messages[2].content[1].image_url.url).
//
// Part types other than "image_url" are not this package's business: the
// HTTP front's parser (server/openaiwire) and the proto constraints
// (buf.validate on ContentPart.type) refuse them already. The package
// depends on no configuration package: the gateway converts ai.vision into
// a [Policy].
package imagecheck

import (
	"fmt"
	"strconv"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// DefaultMaxImageBytes is the decoded size limit of one image, in bytes,
// when [Policy.MaxImageBytes] is zero: 8 MiB (8,388,608 bytes), the
// default of ai.vision.max_image_bytes.
const DefaultMaxImageBytes int64 = 8 << 20

// Policy is the image policy, ai.vision as the gateway configured it.
type Policy struct {
	// MaxImageBytes bounds one image's decoded size, in bytes, as computed
	// from a data: URI's base64 length. Zero means [DefaultMaxImageBytes];
	// a negative value is an error of [New].
	MaxImageBytes int64
	// AllowDataURIs accepts inline data: URI images. The zero value refuses
	// them; the gateway maps ai.vision.allow_data_uris (default true).
	AllowDataURIs bool
	// AllowedOrigins are the origins remote image URLs may come from, each
	// "https://host" or "https://host:port" with no path, query, fragment
	// or userinfo. None means no remote image is accepted. [New]
	// lower-cases the host and makes the default port 443 explicit.
	AllowedOrigins []string
}

// Checker checks the image parts of chat requests against a [Policy]. It
// is immutable and safe for concurrent use. Build it with [New].
type Checker struct {
	maxImageBytes int64
	allowDataURIs bool
	origins       []origin
}

// New validates and normalises p and returns its [Checker]. The error
// names the offending origin or value: an origin that is not https, has no
// host, carries a path, query, fragment, userinfo or percent-encoding, a
// trailing dot, a non-ASCII host (configure IDNs in their punycode xn--
// form), or a bad port; or a negative MaxImageBytes.
func New(p Policy) (*Checker, error) {
	c := &Checker{maxImageBytes: p.MaxImageBytes, allowDataURIs: p.AllowDataURIs}
	switch {
	case c.maxImageBytes == 0:
		c.maxImageBytes = DefaultMaxImageBytes
	case c.maxImageBytes < 0:
		return nil, fmt.Errorf("vision: max image bytes %d is negative", p.MaxImageBytes)
	}
	for _, s := range p.AllowedOrigins {
		o, err := parseOrigin(s)
		if err != nil {
			return nil, fmt.Errorf("vision: allowed origin %q: %w", s, err)
		}
		if !c.allowed(o) {
			c.origins = append(c.origins, o)
		}
	}
	return c, nil
}

// MaxImageBytes returns the decoded size limit of one image, in bytes,
// after defaulting.
func (c *Checker) MaxImageBytes() int64 { return c.maxImageBytes }

// Check checks every "image_url" part of req and returns how many there
// are (the images the budget reserves reserve_tokens_per_image for; the
// same count as [Images]). It returns 0 and the first refusal, a
// [*faults.Error]:
//
//   - [faults.RequestTooLarge] (413) for a data: URI image whose decoded
//     size is over the limit, Param messages[i].content[j].image_url.url;
//   - [faults.InvalidRequest] (400), same Param, for a data: URI when they
//     are not allowed, one that is not base64, not of an image media type
//     or whose base64 is broken (see the package documentation), and for a
//     remote URL that is not https or whose origin is not exactly an
//     allowed one;
//   - [faults.InvalidRequest] (400), Param messages[i].content[j].image_url,
//     for an "image_url" part without an image_url object, or for a part
//     of another type that carries one (it would reach the upstream
//     unchecked).
//
// A nil req has no image. Check reads req only. It allocates nothing
// proportional to the request: nothing for data: URIs whatever their
// size, one small net/url parse of the origin (scheme and authority) per
// remote URL, and the error when it refuses.
func (c *Checker) Check(req *flexwayv1.CreateChatCompletionRequest) (images int, err error) {
	for i, m := range req.GetMessages() {
		for j, p := range m.GetParts().GetParts() {
			iu := p.GetImageUrl()
			if p.GetType() != "image_url" {
				if iu != nil {
					return 0, partError(faults.InvalidRequest, i, j, "image_url",
						fmt.Sprintf("a %q content part cannot carry an image_url; use an \"image_url\" part", clip(p.GetType())))
				}
				continue
			}
			if iu == nil {
				return 0, partError(faults.InvalidRequest, i, j, "image_url", "an image_url content part needs an image_url object with a url")
			}
			if r := c.checkURL(iu.GetUrl()); r != nil {
				return 0, partError(r.reason, i, j, "image_url.url", r.msg)
			}
			images++
		}
	}
	return images, nil
}

// Images returns how many "image_url" parts req holds, checked or not: the
// count the budget reserves reserve_tokens_per_image for, and the parts
// that make the call need the vision capability.
func Images(req *flexwayv1.CreateChatCompletionRequest) int {
	n := 0
	for _, m := range req.GetMessages() {
		for _, p := range m.GetParts().GetParts() {
			if p.GetType() == "image_url" {
				n++
			}
		}
	}
	return n
}

// refusal is why one image URL is refused, before the part is known.
type refusal struct {
	reason faults.Reason
	msg    string
}

// invalid returns a 400 refusal.
func invalid(format string, args ...any) *refusal {
	return &refusal{reason: faults.InvalidRequest, msg: fmt.Sprintf(format, args...)}
}

// checkURL checks one image URL: a data: URI or an https URL.
func (c *Checker) checkURL(s string) *refusal {
	switch {
	case hasPrefix(s, "data:"):
		return c.checkDataURI(s[len("data:"):])
	case hasPrefix(s, "https://"):
		return c.checkRemote(s)
	case hasPrefix(s, "http://"):
		return invalid("image URLs must be https; http:// is refused")
	case s == "":
		return invalid("the image url is empty")
	}
	return invalid("an image url must be an https:// URL or a data: URI")
}

// partError is the *faults.Error of a refused part: Param is
// messages[i].content[j].<field>, and the message names it as the HTTP
// front's parse errors do.
func partError(r faults.Reason, i, j int, field, msg string) *faults.Error {
	param := "messages[" + strconv.Itoa(i) + "].content[" + strconv.Itoa(j) + "]." + field
	return &faults.Error{Reason: r, Message: "invalid '" + param + "': " + msg, Param: param}
}

// clip bounds a client-supplied string quoted back in a message.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
