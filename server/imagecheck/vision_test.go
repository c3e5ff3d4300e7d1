package imagecheck_test

import (
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/imagecheck"
)

const mib = 1 << 20

// reference is ai.vision of testdata/config/compat/reference.yaml.
var reference = imagecheck.Policy{
	MaxImageBytes:  8 * mib,
	AllowDataURIs:  true,
	AllowedOrigins: []string{"https://images.example.com"},
}

func mustNew(t testing.TB, p imagecheck.Policy) *imagecheck.Checker {
	t.Helper()
	c, err := imagecheck.New(p)
	if err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	return c
}

func textPart(s string) *flexwayv1.ContentPart {
	return &flexwayv1.ContentPart{Type: "text", Text: &s}
}

func imagePart(url string) *flexwayv1.ContentPart {
	return &flexwayv1.ContentPart{Type: "image_url", ImageUrl: &flexwayv1.ImageUrl{Url: url}}
}

func partsMessage(parts ...*flexwayv1.ContentPart) *flexwayv1.ChatMessage {
	return &flexwayv1.ChatMessage{Role: "user", Content: &flexwayv1.ChatMessage_Parts{Parts: &flexwayv1.ContentParts{Parts: parts}}}
}

func textMessage(role, s string) *flexwayv1.ChatMessage {
	return &flexwayv1.ChatMessage{Role: role, Content: &flexwayv1.ChatMessage_Text{Text: s}}
}

// probe puts part at messages[1].content[2], after a system message and a
// text and a valid image part, so that the param's indexes are tested.
func probe(part *flexwayv1.ContentPart) *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{
		textMessage("system", "be brief"),
		partsMessage(textPart("what is this?"), imagePart(dataURI("image/png", 16)), part),
	}}
}

// payload returns n deterministic pseudo-random bytes.
func payload(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 5))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// dataURI is a data: URI of media type mt holding n bytes.
func dataURI(mt string, n int) string {
	return "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(payload(n))
}

// wantFault asserts err is a *faults.Error with reason r, HTTP status,
// param and a message containing msg.
func wantFault(t *testing.T, err error, r faults.Reason, param, msg string) {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v (%T), want a *faults.Error", err, err)
	}
	status := map[faults.Reason]int{faults.InvalidRequest: http.StatusBadRequest, faults.RequestTooLarge: http.StatusRequestEntityTooLarge}[r]
	if fe.Reason != r || fe.HTTPStatus() != status || fe.Param != param {
		t.Fatalf("err = {reason %s, status %d, param %q}, want {%s, %d, %q}; message %q", fe.Reason, fe.HTTPStatus(), fe.Param, r, status, param, fe.Message)
	}
	if !strings.Contains(fe.Message, msg) {
		t.Fatalf("message %q does not contain %q", fe.Message, msg)
	}
	if !strings.HasPrefix(fe.Message, "invalid '"+param+"': ") {
		t.Fatalf("message %q does not name %s", fe.Message, param)
	}
}

const urlParam = "messages[1].content[2].image_url.url"

func TestCheckImageURLs(t *testing.T) {
	c := mustNew(t, reference)
	png := base64.StdEncoding.EncodeToString(payload(30))
	tests := []struct {
		name   string
		url    string
		reason faults.Reason // empty: accepted
		msg    string
	}{
		// data: URIs accepted.
		{name: "png", url: dataURI("image/png", 100)},
		{name: "jpeg", url: dataURI("image/jpeg", 101)},
		{name: "jpg alias", url: dataURI("image/jpg", 102)},
		{name: "gif", url: dataURI("image/gif", 1)},
		{name: "webp", url: dataURI("image/webp", 2)},
		{name: "one pad", url: "data:image/png;base64,QUI="},
		{name: "two pads", url: "data:image/png;base64,QQ=="},
		{name: "parameters", url: "data:image/png;name=cat.png;charset=binary;base64," + png},
		// data: URIs refused.
		{name: "not base64", url: "data:image/png," + png, reason: faults.InvalidRequest, msg: "only base64"},
		{name: "no comma", url: "data:image/png;base64" + png, reason: faults.InvalidRequest, msg: "needs a comma"},
		{name: "text media type", url: "data:text/plain;base64," + png, reason: faults.InvalidRequest, msg: `media type "text/plain" is not an accepted image type`},
		{name: "svg", url: "data:image/svg+xml;base64," + png, reason: faults.InvalidRequest, msg: `"image/svg+xml" is not an accepted image type`},
		{name: "heic", url: "data:image/heic;base64," + png, reason: faults.InvalidRequest, msg: `"image/heic"`},
		{name: "upper-case media type (media types ignore case)", url: "data:IMAGE/PNG;base64," + png},
		{name: "upper-case svg", url: "data:IMAGE/SVG+XML;base64," + png, reason: faults.InvalidRequest, msg: `"IMAGE/SVG+XML"`},
		{name: "no media type", url: "data:;base64," + png, reason: faults.InvalidRequest, msg: `media type ""`},
		{name: "parameter without value", url: "data:image/png;charset;base64," + png, reason: faults.InvalidRequest, msg: "malformed parameter"},
		{name: "parameter with space", url: "data:image/png;name=a b;base64," + png, reason: faults.InvalidRequest, msg: "malformed parameter"},
		{name: "empty data", url: "data:image/png;base64,", reason: faults.InvalidRequest, msg: "no image data"},
		{name: "length not a multiple of 4", url: "data:image/png;base64,QUJDR", reason: faults.InvalidRequest, msg: "5 characters long, not a multiple of 4"},
		{name: "unpadded", url: "data:image/png;base64,QQ", reason: faults.InvalidRequest, msg: "not a multiple of 4"},
		{name: "bad character", url: "data:image/png;base64,QU!D", reason: faults.InvalidRequest, msg: `'!' at character 2, outside the base64 alphabet`},
		{name: "bad character late", url: "data:image/png;base64," + png[:36] + "*" + png[37:], reason: faults.InvalidRequest, msg: `'*' at character 36`},
		{name: "non-ASCII byte", url: "data:image/png;base64,QU\xc3\xa9", reason: faults.InvalidRequest, msg: "byte 0xc3 at character 2"},
		{name: "NUL byte", url: "data:image/png;base64,QUJ\x00", reason: faults.InvalidRequest, msg: "byte 0x00 at character 3"},
		{name: "line break", url: "data:image/png;base64," + png[:39] + "\n" + png[:3], reason: faults.InvalidRequest, msg: "whitespace or a line break at character 39"},
		{name: "CRLF", url: "data:image/png;base64,QU\r\nQUJD", reason: faults.InvalidRequest, msg: "whitespace or a line break at character 2"},
		{name: "space", url: "data:image/png;base64,QUJD QUJ", reason: faults.InvalidRequest, msg: "whitespace or a line break at character 4"},
		{name: "url-safe minus", url: "data:image/png;base64,QU-D", reason: faults.InvalidRequest, msg: "URL-safe alphabet ('-' at character 2)"},
		{name: "url-safe underscore", url: "data:image/png;base64,QU_D", reason: faults.InvalidRequest, msg: "URL-safe alphabet ('_'"},
		{name: "padding inside", url: "data:image/png;base64,QQ==QUJD", reason: faults.InvalidRequest, msg: "padding ('=') at character 2, before its end"},
		{name: "pad in third of four", url: "data:image/png;base64,QQ=A", reason: faults.InvalidRequest, msg: "padding ('=') at character 2"},
		{name: "three pads", url: "data:image/png;base64,Q===", reason: faults.InvalidRequest, msg: "padding ('=') at character 1"},
		{name: "only pads", url: "data:image/png;base64,====", reason: faults.InvalidRequest, msg: "padding ('=') at character 0"},
		// remote URLs accepted.
		{name: "allowed origin", url: "https://images.example.com/cats/1.png"},
		{name: "allowed origin, explicit 443", url: "https://images.example.com:443/cats/1.png"},
		{name: "allowed origin, no path", url: "https://images.example.com"},
		{name: "allowed origin, query and fragment", url: "https://images.example.com/a.png?size=large&v=2#top"},
		{name: "allowed origin, escaped path", url: "https://images.example.com/a%20b%2F.png"},
		// remote URLs refused.
		{name: "http", url: "http://images.example.com/a.png", reason: faults.InvalidRequest, msg: "must be https"},
		{name: "suffix host", url: "https://images.example.com.evil.test/a.png", reason: faults.InvalidRequest, msg: "origin https://images.example.com.evil.test is not an allowed image origin"},
		{name: "prefix host", url: "https://evilimages.example.com/a.png", reason: faults.InvalidRequest, msg: "not an allowed image origin"},
		{name: "parent host", url: "https://example.com/a.png", reason: faults.InvalidRequest, msg: "not an allowed image origin"},
		{name: "userinfo", url: "https://user@images.example.com/a.png", reason: faults.InvalidRequest, msg: "must not carry userinfo"},
		{name: "user and password", url: "https://user:pw@images.example.com/a.png", reason: faults.InvalidRequest, msg: "must not carry userinfo"},
		{name: "at trick", url: "https://images.example.com@evil.test/a.png", reason: faults.InvalidRequest, msg: "must not carry userinfo"},
		{name: "empty userinfo", url: "https://@images.example.com/a.png", reason: faults.InvalidRequest, msg: "must not carry userinfo"},
		{name: "other port", url: "https://images.example.com:8443/a.png", reason: faults.InvalidRequest, msg: "origin https://images.example.com:8443 is not an allowed image origin"},
		{name: "port 80", url: "https://images.example.com:80/a.png", reason: faults.InvalidRequest, msg: "not an allowed image origin"},
		{name: "port with leading zero", url: "https://images.example.com:0443/a.png", reason: faults.InvalidRequest, msg: `port "0443"`},
		{name: "empty port", url: "https://images.example.com:/a.png", reason: faults.InvalidRequest, msg: `port ""`},
		{name: "port out of range", url: "https://images.example.com:65979/a.png", reason: faults.InvalidRequest, msg: `port "65979"`},
		{name: "two colons", url: "https://images.example.com:443:443/a.png", reason: faults.InvalidRequest, msg: `port "443:443"`},
		{name: "upper-case host", url: "https://IMAGES.example.com/a.png", reason: faults.InvalidRequest, msg: "must be lower-case"},
		{name: "mixed-case host", url: "https://Images.Example.com/a.png", reason: faults.InvalidRequest, msg: "must be lower-case"},
		{name: "trailing dot", url: "https://images.example.com./a.png", reason: faults.InvalidRequest, msg: "trailing dot"},
		{name: "empty label", url: "https://images..example.com/a.png", reason: faults.InvalidRequest, msg: "empty label"},
		{name: "IDN look-alike, Cyrillic a", url: "https://im\u0430ges.example.com/a.png", reason: faults.InvalidRequest, msg: "non-ASCII byte at byte 10"},
		{name: "IDN look-alike, punycode", url: "https://xn--imges-3ve.example.com/a.png", reason: faults.InvalidRequest, msg: "not an allowed image origin"},
		{name: "fullwidth dot", url: "https://images\uff0eexample.com/a.png", reason: faults.InvalidRequest, msg: "non-ASCII"},
		{name: "backslash before at", url: `https://images.example.com\@evil.test/a.png`, reason: faults.InvalidRequest, msg: "backslash at byte 26"},
		{name: "backslash as path", url: `https://evil.test\images.example.com/a.png`, reason: faults.InvalidRequest, msg: "backslash"},
		{name: "percent-encoded host", url: "https://images%2eexample.com/a.png", reason: faults.InvalidRequest, msg: "must not be percent-encoded"},
		{name: "percent-encoded letter", url: "https://%69mages.example.com/a.png", reason: faults.InvalidRequest, msg: "must not be percent-encoded"},
		{name: "empty host", url: "https:///a.png", reason: faults.InvalidRequest, msg: "the host is empty"},
		{name: "port only", url: "https://:443/a.png", reason: faults.InvalidRequest, msg: "the host is empty"},
		{name: "IPv6 literal", url: "https://[::1]/a.png", reason: faults.InvalidRequest, msg: "IPv6 literal"},
		{name: "underscore host", url: "https://images_example.com/a.png", reason: faults.InvalidRequest, msg: `contains '_'`},
		{name: "space in path", url: "https://images.example.com/a b.png", reason: faults.InvalidRequest, msg: "whitespace or a control character at byte 28"},
		{name: "leading space", url: " https://images.example.com/a.png", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "trailing newline", url: "https://images.example.com/a.png\n", reason: faults.InvalidRequest, msg: "whitespace or a control character at byte 32"},
		{name: "tab in host", url: "https://images.example\t.com/a.png", reason: faults.InvalidRequest, msg: "whitespace or a control character"},
		{name: "NUL in host", url: "https://images.example.com\x00.evil.test/a.png", reason: faults.InvalidRequest, msg: "control character at byte 26"},
		{name: "DEL", url: "https://images.example.com/\x7f", reason: faults.InvalidRequest, msg: "control character"},
		{name: "bad escape in path", url: "https://images.example.com/a%zz.png", reason: faults.InvalidRequest, msg: "malformed percent-escape"},
		{name: "truncated escape", url: "https://images.example.com/a%2", reason: faults.InvalidRequest, msg: "malformed percent-escape"},
		{name: "upper-case scheme", url: "HTTPS://images.example.com/a.png", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "scheme-relative", url: "//images.example.com/a.png", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "ftp", url: "ftp://images.example.com/a.png", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "javascript", url: "javascript:alert(1)", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "upper-case data scheme", url: "DATA:image/png;base64,QUJD", reason: faults.InvalidRequest, msg: "must be an https:// URL or a data: URI"},
		{name: "empty url", url: "", reason: faults.InvalidRequest, msg: "the image url is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := c.Check(probe(imagePart(tt.url)))
			if tt.reason == "" {
				if err != nil || n != 2 {
					t.Fatalf("Check = %d, %v; want 2 images, nil", n, err)
				}
				return
			}
			if n != 0 {
				t.Errorf("images = %d on a refusal, want 0", n)
			}
			wantFault(t, err, tt.reason, urlParam, tt.msg)
		})
	}
}

func TestCheckSizeLimit(t *testing.T) {
	c := mustNew(t, reference)
	if got := c.MaxImageBytes(); got != 8*mib {
		t.Fatalf("MaxImageBytes = %d, want %d", got, 8*mib)
	}
	for _, tt := range []struct {
		name  string
		bytes int
		ok    bool
	}{
		{name: "7 MiB", bytes: 7 * mib, ok: true},
		{name: "8 MiB - 1", bytes: 8*mib - 1, ok: true},
		{name: "8 MiB exactly", bytes: 8 * mib, ok: true},
		{name: "8 MiB + 1", bytes: 8*mib + 1},
		{name: "8 MiB + 2", bytes: 8*mib + 2},
		{name: "8 MiB + 3", bytes: 8*mib + 3},
		{name: "20 MiB", bytes: 20 * mib},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := c.Check(probe(imagePart(dataURI("image/jpeg", tt.bytes))))
			if tt.ok {
				if err != nil || n != 2 {
					t.Fatalf("Check = %d, %v; want 2, nil", n, err)
				}
				return
			}
			wantFault(t, err, faults.RequestTooLarge, urlParam, "is "+strconv.Itoa(tt.bytes)+" bytes decoded, over the limit of 8388608 bytes")
		})
	}
}

// TestCheckSizeBeforeAlphabet: the size is judged from the length alone,
// so an oversized image is 413 even when its base64 is broken.
func TestCheckSizeBeforeAlphabet(t *testing.T) {
	c := mustNew(t, imagecheck.Policy{MaxImageBytes: 3, AllowDataURIs: true})
	const param = "messages[0].content[0].image_url.url"
	_, err := c.Check(probeRemote("data:image/png;base64,!!!!!!!!"))
	wantFault(t, err, faults.RequestTooLarge, param, "the image is 6 bytes decoded, over the limit of 3 bytes")
	_, err = c.Check(probeRemote("data:image/png;base64,!!!!"))
	wantFault(t, err, faults.InvalidRequest, param, "'!' at character 0")
}

func TestCheckCustomLimit(t *testing.T) {
	c := mustNew(t, imagecheck.Policy{MaxImageBytes: 1000, AllowDataURIs: true})
	if _, err := c.Check(probe(imagePart(dataURI("image/png", 1000)))); err != nil {
		t.Fatalf("1000 bytes under a 1000-byte limit: %v", err)
	}
	_, err := c.Check(probe(imagePart(dataURI("image/png", 1001))))
	wantFault(t, err, faults.RequestTooLarge, urlParam, "the image is 1001 bytes decoded, over the limit of 1000 bytes")
	// The probe's own 16-byte image passes a 16-byte limit and not 15.
	c = mustNew(t, imagecheck.Policy{MaxImageBytes: 15, AllowDataURIs: true})
	_, err = c.Check(probe(textPart("x")))
	wantFault(t, err, faults.RequestTooLarge, "messages[1].content[1].image_url.url", "16 bytes decoded, over the limit of 15 bytes")
}

func TestCheckDataURIsNotAllowed(t *testing.T) {
	c := mustNew(t, imagecheck.Policy{AllowedOrigins: []string{"https://images.example.com"}})
	req := &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{
		partsMessage(imagePart("https://images.example.com/a.png"), imagePart(dataURI("image/png", 10))),
	}}
	_, err := c.Check(req)
	wantFault(t, err, faults.InvalidRequest, "messages[0].content[1].image_url.url", "data: URI images are not accepted by this gateway")
	req.Messages[0].GetParts().Parts = req.Messages[0].GetParts().Parts[:1]
	if n, err := c.Check(req); err != nil || n != 1 {
		t.Fatalf("remote image alone: %d, %v; want 1, nil", n, err)
	}
}

func TestCheckNoOrigins(t *testing.T) {
	for _, tt := range []struct {
		p   imagecheck.Policy
		msg string
	}{
		{imagecheck.Policy{AllowDataURIs: true}, "remote image URLs are not accepted by this gateway; send the image as a base64 data: URI"},
		{imagecheck.Policy{}, "remote image URLs are not accepted by this gateway"},
	} {
		_, err := mustNew(t, tt.p).Check(probeRemote("https://images.example.com/a.png"))
		wantFault(t, err, faults.InvalidRequest, "messages[0].content[0].image_url.url", tt.msg)
	}
}

func TestCheckPartShapes(t *testing.T) {
	c := mustNew(t, reference)
	_, err := c.Check(probe(&flexwayv1.ContentPart{Type: "image_url"}))
	wantFault(t, err, faults.InvalidRequest, "messages[1].content[2].image_url", "needs an image_url object")

	smuggled := textPart("hi")
	smuggled.ImageUrl = &flexwayv1.ImageUrl{Url: "https://evil.test/a.png"}
	_, err = c.Check(probe(smuggled))
	wantFault(t, err, faults.InvalidRequest, "messages[1].content[2].image_url", `a "text" content part cannot carry an image_url`)

	// Other part types are the parser's and protovalidate's business: a
	// refusal part passes here untouched.
	refusal := &flexwayv1.ContentPart{Type: "refusal", ExtraFields: map[string]string{"refusal": `"no"`}}
	if n, err := c.Check(probe(refusal)); err != nil || n != 1 {
		t.Fatalf("refusal part: %d, %v; want 1, nil", n, err)
	}
}

func TestCheckCountsImages(t *testing.T) {
	c := mustNew(t, reference)
	req := &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{
		textMessage("system", "s"),
		partsMessage(imagePart(dataURI("image/png", 10)), textPart("and"), imagePart("https://images.example.com/b.png")),
		{Role: "assistant", Content: &flexwayv1.ChatMessage_Null{}},
		partsMessage(textPart("one more"), imagePart(dataURI("image/webp", 20))),
		partsMessage(),
	}}
	n, err := c.Check(req)
	if err != nil || n != 3 {
		t.Fatalf("Check = %d, %v; want 3, nil", n, err)
	}
	if got := imagecheck.Images(req); got != 3 {
		t.Fatalf("Images = %d, want 3", got)
	}
	// Images counts without checking.
	req.Messages[3].GetParts().Parts[1] = imagePart("http://evil.test/x.png")
	if got := imagecheck.Images(req); got != 3 {
		t.Fatalf("Images of an unchecked request = %d, want 3", got)
	}
	if _, err := c.Check(req); err == nil {
		t.Fatal("http image accepted")
	}
	if n, err := c.Check(nil); n != 0 || err != nil {
		t.Fatalf("Check(nil) = %d, %v", n, err)
	}
	if n := imagecheck.Images(nil); n != 0 {
		t.Fatalf("Images(nil) = %d", n)
	}
	text := &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{textMessage("user", "hi")}}
	if n, err := c.Check(text); n != 0 || err != nil {
		t.Fatalf("text-only request: %d, %v", n, err)
	}
}

// TestCheckFirstRefusal: the first refused part, in message then part
// order, is the one reported.
func TestCheckFirstRefusal(t *testing.T) {
	c := mustNew(t, reference)
	req := &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{
		partsMessage(textPart("a")),
		partsMessage(imagePart(dataURI("image/png", 4)), imagePart("data:image/png;base64,QU!D")),
		partsMessage(imagePart("http://x/y.png")),
	}}
	_, err := c.Check(req)
	wantFault(t, err, faults.InvalidRequest, "messages[1].content[1].image_url.url", "'!'")
}

func TestNewOrigins(t *testing.T) {
	for _, tt := range []struct {
		name    string
		origins []string
		accept  []string
		refuse  []string
	}{
		{
			name:    "default port",
			origins: []string{"https://images.example.com"},
			accept:  []string{"https://images.example.com/a", "https://images.example.com:443/a"},
			refuse:  []string{"https://images.example.com:8443/a", "https://cdn.example.com/a"},
		},
		{
			name:    "explicit 443 is the default port",
			origins: []string{"https://images.example.com:443"},
			accept:  []string{"https://images.example.com/a", "https://images.example.com:443/a"},
			refuse:  []string{"https://images.example.com:8443/a"},
		},
		{
			name:    "other port only",
			origins: []string{"https://images.example.com:8443"},
			accept:  []string{"https://images.example.com:8443/a"},
			refuse:  []string{"https://images.example.com/a", "https://images.example.com:443/a"},
		},
		{
			name:    "configured host is lower-cased; requests must be lower-case",
			origins: []string{"https://Images.EXAMPLE.com"},
			accept:  []string{"https://images.example.com/a"},
			refuse:  []string{"https://Images.EXAMPLE.com/a"},
		},
		{
			name:    "punycode host configured exactly",
			origins: []string{"https://xn--bcher-kva.example"},
			accept:  []string{"https://xn--bcher-kva.example/a"},
			refuse:  []string{"https://b\u00fccher.example/a", "https://xn--bcher-kvb.example/a"},
		},
		{
			name:    "several origins, IPv4 literal",
			origins: []string{"https://a.example.com", "https://10.0.0.7:8443", "https://a.example.com"},
			accept:  []string{"https://a.example.com/x", "https://10.0.0.7:8443/x"},
			refuse:  []string{"https://10.0.0.7/x", "https://b.example.com/x"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, imagecheck.Policy{AllowedOrigins: tt.origins})
			for _, u := range tt.accept {
				if _, err := c.Check(probeRemote(u)); err != nil {
					t.Errorf("%s refused: %v", u, err)
				}
			}
			for _, u := range tt.refuse {
				_, err := c.Check(probeRemote(u))
				var fe *faults.Error
				if !errors.As(err, &fe) || fe.Reason != faults.InvalidRequest || fe.Param != "messages[0].content[0].image_url.url" {
					t.Errorf("%s: err = %v, want invalid_request on the url", u, err)
				}
			}
		})
	}
}

func probeRemote(u string) *flexwayv1.CreateChatCompletionRequest {
	return &flexwayv1.CreateChatCompletionRequest{Messages: []*flexwayv1.ChatMessage{partsMessage(imagePart(u))}}
}

func TestNewRefuses(t *testing.T) {
	for _, tt := range []struct {
		origin, msg string
	}{
		{"http://images.example.com", "must be https://host[:port]"},
		{"images.example.com", "must be https://host[:port]"},
		{"HTTPS://images.example.com", "must be https://host[:port]"},
		{"https://images.example.com/", "no path, query or fragment"},
		{"https://images.example.com/img", "no path, query or fragment"},
		{"https://images.example.com?x=1", "no path, query or fragment"},
		{"https://images.example.com#x", "no path, query or fragment"},
		{"https://user@images.example.com", "no userinfo"},
		{"https://images%2eexample.com", "not percent-encoded"},
		{"https://[::1]", "IPv6"},
		{"https://b\u00fccher.example", "punycode (xn--)"},
		{"https://images.example.com ", "printable ASCII"},
		{`https://images.example.com\`, "backslashes"},
		{"https://", "the host is empty"},
		{"https://:443", "the host is empty"},
		{"https://images.example.com.", "trailing dot"},
		{"https://images..example.com", "empty label"},
		{"https://images_example.com", `contains '_'`},
		{"https://images.example.com:", `port ""`},
		{"https://images.example.com:0", `port "0"`},
		{"https://images.example.com:08443", `port "08443"`},
		{"https://images.example.com:65536", `port "65536"`},
		{"https://images.example.com:https", `port "https"`},
	} {
		t.Run(tt.origin, func(t *testing.T) {
			c, err := imagecheck.New(imagecheck.Policy{AllowedOrigins: []string{"https://ok.example.com", tt.origin}})
			if err == nil {
				t.Fatalf("New accepted %q", tt.origin)
			}
			if c != nil {
				t.Error("New returned a checker with its error")
			}
			for _, want := range []string{"vision: allowed origin " + strconv.Quote(tt.origin) + ": ", tt.msg} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestNewMaxImageBytes(t *testing.T) {
	if c := mustNew(t, imagecheck.Policy{}); c.MaxImageBytes() != imagecheck.DefaultMaxImageBytes || imagecheck.DefaultMaxImageBytes != 8388608 {
		t.Fatalf("default MaxImageBytes = %d, want 8388608", c.MaxImageBytes())
	}
	if _, err := imagecheck.New(imagecheck.Policy{MaxImageBytes: -1}); err == nil || !strings.Contains(err.Error(), "max image bytes -1 is negative") {
		t.Fatalf("negative limit: err = %v", err)
	}
}

// TestCheckAllocations: a passing request costs no allocation for its
// data: URIs, whatever their size, and one (net/url's parse of the origin)
// per remote URL, whatever its length.
func TestCheckAllocations(t *testing.T) {
	c := mustNew(t, imagecheck.Policy{MaxImageBytes: 24 * mib, AllowDataURIs: true, AllowedOrigins: reference.AllowedOrigins})
	req := probe(imagePart(dataURI("image/png", 20*mib)))
	if allocs := testing.AllocsPerRun(5, func() {
		if n, err := c.Check(req); err != nil || n != 2 {
			t.Fatalf("Check = %d, %v", n, err)
		}
	}); allocs != 0 {
		t.Fatalf("Check of data: URIs allocated %v times per run, want 0", allocs)
	}
	long := "https://images.example.com:443/" + strings.Repeat("a%20b/", 100000) + "?x=1"
	req.Messages = append(req.Messages, partsMessage(imagePart(long), imagePart("https://images.example.com/b.png")))
	if allocs := testing.AllocsPerRun(5, func() {
		if n, err := c.Check(req); err != nil || n != 4 {
			t.Fatalf("Check = %d, %v", n, err)
		}
	}); allocs != 2 {
		t.Fatalf("Check with two remote URLs allocated %v times per run, want 2", allocs)
	}
}
