package imagecheck_test

import (
	"encoding/base64"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/imagecheck"
)

// body20MiB is a vision request of about 20 MiB: images holding total
// decoded bytes, split evenly into n data: URI parts, plus a remote one.
func body20MiB(n int) (req *flexwayv1.CreateChatCompletionRequest, size int64) {
	const total = 15 * mib // 20 MiB of base64
	parts := []*flexwayv1.ContentPart{textPart("describe these")}
	for range n {
		parts = append(parts, imagePart(dataURI("image/png", total/n)))
	}
	parts = append(parts, imagePart("https://images.example.com/cats/1.png?size=large"))
	for _, p := range parts {
		size += int64(len(p.GetImageUrl().GetUrl()) + len(p.GetText()))
	}
	return &flexwayv1.CreateChatCompletionRequest{Model: "m", Messages: []*flexwayv1.ChatMessage{partsMessage(parts...)}}, size
}

func benchCheck(b *testing.B, p imagecheck.Policy, images int) {
	c := mustNew(b, p)
	req, size := body20MiB(images)
	if size < 20*mib {
		b.Fatalf("body is %d bytes, want at least 20 MiB", size)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if n, err := c.Check(req); err != nil || n != images+1 {
			b.Fatalf("Check = %d, %v", n, err)
		}
	}
}

// BenchmarkCheck20MiB measures a 20 MiB vision body holding one data: URI
// image (15 MiB decoded, under a 24 MiB limit) and one remote image.
func BenchmarkCheck20MiB(b *testing.B) {
	benchCheck(b, imagecheck.Policy{MaxImageBytes: 24 * mib, AllowDataURIs: true, AllowedOrigins: reference.AllowedOrigins}, 1)
}

// BenchmarkCheck20MiBSeveral measures a 20 MiB vision body holding three
// 5 MiB data: URI images under the default 8 MiB limit, and a remote one.
func BenchmarkCheck20MiBSeveral(b *testing.B) {
	benchCheck(b, reference, 3)
}

// FuzzDataURIBase64 holds the one-pass validation to encoding/base64's
// verdict (without its tolerance of line breaks) and the decoded size
// computed from the length to the decoder's.
func FuzzDataURIBase64(f *testing.F) {
	for _, s := range []string{"", "QQ==", "QUI=", "QUJD", "QQ=A", "Q===", "====", "QU-D", "QU\nD", "QUJDR", "QR==", "/+/+", base64.StdEncoding.EncodeToString(payload(100))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		const param = "messages[0].content[0].image_url.url"
		req := probeRemote("data:image/jpeg;base64," + data)
		dec, derr := base64.StdEncoding.DecodeString(data)
		valid := derr == nil && data != "" && !strings.ContainsAny(data, "\r\n")
		_, err := mustNew(t, imagecheck.Policy{MaxImageBytes: 1 << 40, AllowDataURIs: true}).Check(req)
		if (err == nil) != valid {
			t.Fatalf("Check(%q) = %v; encoding/base64 says valid = %v (%v)", data, err, valid, derr)
		}
		if !valid {
			wantFault(t, err, faults.InvalidRequest, param, "")
			return
		}
		if _, err := mustNew(t, imagecheck.Policy{MaxImageBytes: int64(len(dec)), AllowDataURIs: true}).Check(req); err != nil {
			t.Fatalf("%q decodes to %d bytes, refused at that limit: %v", data, len(dec), err)
		}
		_, err = mustNew(t, imagecheck.Policy{MaxImageBytes: int64(len(dec)) - 1, AllowDataURIs: true}).Check(req)
		if len(dec) == 1 {
			// A limit of 0 is the default.
			if err != nil {
				t.Fatalf("%q: %v", data, err)
			}
			return
		}
		wantFault(t, err, faults.RequestTooLarge, param, "over the limit")
	})
}
