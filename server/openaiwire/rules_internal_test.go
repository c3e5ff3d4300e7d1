package openaiwire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestModelledNames: the names each level refuses in extra_fields, read
// from the descriptors, are the OpenAI members the parser types; "null"
// is accepted only under those it keeps a null for.
func TestModelledNames(t *testing.T) {
	for name, tt := range map[string]struct {
		l    level
		want []modelled
	}{
		"request": {requestLevel, []modelled{{"model", false}, {"messages", false}, {"stream", true}, {"stream_options", true},
			{"max_tokens", true}, {"max_completion_tokens", true}, {"n", true}, {"user", true}}},
		"stream_options": {streamOptionsLevel, []modelled{{"include_usage", true}}},
		"message":        {messageLevel, []modelled{{"role", false}, {"content", false}, {"name", true}}},
		"part":           {partLevel, []modelled{{"type", false}, {"text", true}, {"image_url", true}}},
		"image_url":      {imageURLLevel, []modelled{{"url", false}, {"detail", true}}},
		"embeddings": {embeddingLevel, []modelled{{"model", false}, {"input", true}, {"encoding_format", true},
			{"dimensions", true}, {"user", true}}},
	} {
		if d := cmp.Diff(tt.want, tt.l.fields, cmp.AllowUnexported(modelled{})); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
}
