package cache_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/cache"
)

func key(t *testing.T, body string) cache.Key {
	t.Helper()
	k, err := cache.ExactKey([]byte(body))
	if err != nil {
		t.Fatalf("ExactKey(%s): %v", body, err)
	}
	return k
}

// TestExactKeyPinned pins the key of one request, so that a change of the
// canonical form (which empties every shared Redis cache) is deliberate.
func TestExactKeyPinned(t *testing.T) {
	t.Parallel()
	got := key(t, `{"model":"fast","messages":[{"role":"user","content":"hi"}],"temperature":0.2}`)
	const want = "70bdd9e2e85a22541612b9571375e8e5d18b9f0e4d7e96a0d2ba4e06145a362c"
	if got.String() != want {
		t.Errorf("key = %s, want %s", got, want)
	}
}

// TestExactKeySame: requests that differ only in form share a key.
func TestExactKeySame(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, a, b string }{
		{"key_order", `{"messages":[{"role":"user","content":"hi"}],"temperature":1}`, `{"temperature":1,"messages":[{"content":"hi","role":"user"}]}`},
		{"whitespace", `{"a":[1,2],"b":{"c":true}}`, " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : { \"c\" : true } } \n"},
		{"one_point_zero", `{"temperature":1}`, `{"temperature":1.0}`},
		{"exponent", `{"temperature":1}`, `{"temperature":1e0}`},
		{"exponent_shift", `{"temperature":1}`, `{"temperature":10e-1}`},
		{"exponent_upper", `{"top_p":0.5}`, `{"top_p":5E-1}`},
		{"fraction_exponent", `{"x":1500}`, `{"x":1.5e+3}`},
		{"negative_zero", `{"x":0}`, `{"x":-0.0e5}`},
		{"unicode_escape", `{"messages":[{"role":"user","content":"A é"}]}`, `{"messages":[{"role":"user","content":"\u0041 \u00e9"}]}`},
		{"surrogate_pair", `{"s":"😀"}`, `{"s":"\ud83d\ude00"}`},
		{"escaped_slash", `{"s":"a/b"}`, `{"s":"a\/b"}`},
		{"escaped_key", `{"temperature":1}`, `{"\u0074emperature":1}`},
		{"model_ignored", `{"model":"fast","n":1}`, `{"model":"FAST","n":1}`},
		{"stream_ignored", `{"n":1}`, `{"n":1,"stream":true,"stream_options":{"include_usage":true}}`},
		{"nested_key_order", `{"tools":[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":2}}}]}`, `{"tools":[{"function":{"parameters":{"a":2,"b":1},"name":"f"},"type":"function"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if a, b := key(t, tc.a), key(t, tc.b); a != b {
				t.Errorf("keys differ:\n%s\n%s", tc.a, tc.b)
			}
		})
	}
}

// TestExactKeyDiffers: every field that changes the answer changes the
// key, known or not.
func TestExactKeyDiffers(t *testing.T) {
	t.Parallel()
	base := `{"model":"fast","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`
	variants := []string{
		base + `}`,
		base + `,"tool_choice":"required"}`,
		base + `,"tool_choice":"none"}`,
		base + `,"tool_choice":"auto"}`,
		base + `,"tools":[{"type":"function","function":{"name":"f"}}]}`,
		base + `,"response_format":{"type":"json_object"}}`,
		base + `,"temperature":0.2}`,
		base + `,"temperature":0.3}`,
		base + `,"top_p":0.9}`,
		base + `,"seed":9007199254740992}`,
		base + `,"seed":9007199254740993}`, // one above 2^53: a float64 would merge them
		base + `,"max_tokens":10}`,
		base + `,"max_completion_tokens":10}`,
		base + `,"n":2}`,
		base + `,"stop":["\n"]}`,
		base + `,"stop":"\n"}`,
		base + `,"logit_bias":{"50256":-100}}`,
		base + `,"user":"u1"}`,
		base + `,"some_new_field":true}`,
		base + `,"some_new_field":"true"}`,
		base + `,"some_new_field":null}`,
		base + `,"x":1e400}`,
		base + `,"x":1e401}`,
		base + `,"x":-1}`,
		base + `,"x":""}`,
		base + `,"x":"\u0000"}`,
		base + `,"x":"\u0001"}`,
		base + `,"x":[]}`,
		base + `,"x":{}}`,
		base + `,"x":[null]}`,
		base + ",\"x\":\"a\x00\",\"y\":\"\"}", // raw control bytes (invalid JSON) are kept
		base + ",\"x\":\"a\",\"y\":\"\x00\"}",
		base + ",\"x\":\"a\x00\x00\",\"y\":\"\"}",
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"system","content":"be brief"}]}`,
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Hi"}]}`,
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi","name":"bob"}]}`,
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
	}
	seen := map[cache.Key]string{}
	for _, v := range variants {
		k := key(t, v)
		if prev, ok := seen[k]; ok {
			t.Errorf("same key for\n%s\n%s", prev, v)
		}
		seen[k] = v
	}
}

// TestToolChoiceRequiredNone: a request forcing a tool call never shares
// a key with one forbidding it (issue 18's bad input).
func TestToolChoiceRequiredNone(t *testing.T) {
	t.Parallel()
	req := func(tc string) string {
		return `{"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":"` + tc + `"}`
	}
	if key(t, req("required")) == key(t, req("none")) {
		t.Fatal("tool_choice required and none share a key")
	}
	ks1, _ := cache.NewKeys([]byte(req("required")), true)
	ks2, _ := cache.NewKeys([]byte(req("none")), true)
	if !ks1.Semantic || !ks2.Semantic || ks1.Context == ks2.Context {
		t.Fatal("tool_choice required and none share a semantic index")
	}
}

// TestExactKeyMatchesEncodingJSON: the key of a body is the key of the
// body encoding/json writes back from its decoded value (keys sorted,
// numbers reformatted, strings re-escaped), over a corpus of shapes.
func TestExactKeyMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"z":1,"a":[1.50,"x\ty",{"q":null,"p":false}],"m":{"k":"\u00e9\u2028"}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a\"b"},{"type":"image_url","image_url":{"url":"data:x"}}]}],"temperature":0.70,"logit_bias":{"1":-1e2}}`,
		`{"deep":[[[[{"b":[{"d":1,"c":2}]}]]]],"e":1E+2,"f":-0.000125}`,
		`{"html":"<&>","bs":"\\","ctl":"\b\f\n\r\t","big":123456789012}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(v)
		if key(t, body) != key(t, string(again)) {
			t.Errorf("key(%s) != key(%s)", body, again)
		}
	}
}

func TestExactKeyUncacheable(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		``, `[]`, `"x"`, `{`, `{"a":}`, `{"a":1,}`, `{"a":1}x`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
		`{"a":1e}`, `{"a":"\x01"}`, `{"a":"\q"}`, `{"a":"\u12"}`, `{"a":tru}`, `{"a":[1 2]}`, `{"a" 1}`,
		`{"a":1e9999999999999999}`, `{"a":"x`, `{1:2}`,
		`{"a":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`,
	} {
		if _, err := cache.ExactKey([]byte(body)); !errors.Is(err, cache.ErrUncacheable) {
			t.Errorf("ExactKey(%q) error = %v, want ErrUncacheable", body, err)
		}
	}
	if _, err := cache.ExactKey([]byte(`{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`)); err != nil {
		t.Errorf("64 levels: %v", err)
	}
}

// TestLoneSurrogate: a lone surrogate decodes to U+FFFD, as encoding/json
// decodes it, and a surrogate followed by another escape keeps that one.
func TestLoneSurrogate(t *testing.T) {
	t.Parallel()
	if key(t, `{"s":"\ud83dx"}`) != key(t, `{"s":"\ufffdx"}`) {
		t.Error(`"\ud83dx" != "\ufffdx"`)
	}
	if key(t, `{"s":"\ud83d\u0041"}`) != key(t, `{"s":"\ufffdA"}`) {
		t.Error(`"\ud83d\u0041" != "\ufffdA"`)
	}
}

func TestSemanticKeys(t *testing.T) {
	t.Parallel()
	mk := func(sys, last string) string {
		return `{"model":"fast","temperature":0,"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":` + last + `}]}`
	}
	a, err := cache.NewKeys([]byte(mk("faq", `"How do I reset my password?"`)), true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cache.NewKeys([]byte(mk("faq", `"how can I reset my password"`)), true)
	c, _ := cache.NewKeys([]byte(mk("other", `"How do I reset my password?"`)), true)
	parts, _ := cache.NewKeys([]byte(mk("faq", `[{"type":"text","text":"How do I"},{"type":"text","text":"reset \u0000it?"}]`)), true)
	img, _ := cache.NewKeys([]byte(mk("faq", `[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:x"}}]`)), true)
	none, _ := cache.NewKeys([]byte(`{"messages":[{"role":"system","content":"faq"}]}`), true)
	exactOnly, _ := cache.NewKeys([]byte(mk("faq", `"How do I reset my password?"`)), false)

	if !a.Semantic || a.Text != "How do I reset my password?" {
		t.Errorf("a = %+v", a)
	}
	if a.Context != b.Context {
		t.Error("same context, different last message: contexts differ")
	}
	if a.Exact == b.Exact || a.Context == a.Exact {
		t.Error("exact keys must differ from each other and from the context")
	}
	if a.Context == c.Context {
		t.Error("a different system prompt shares the context")
	}
	if !parts.Semantic || parts.Text != "How do I\nreset \x00it?" {
		t.Errorf("parts = %+v", parts)
	}
	if img.Semantic || none.Semantic || exactOnly.Semantic {
		t.Errorf("image part, no user message, or semantic not asked: Semantic must be false (%v %v %v)", img.Semantic, none.Semantic, exactOnly.Semantic)
	}
	if exactOnly.Exact != a.Exact {
		t.Error("withSemantic changed the exact key")
	}
	// The last user message counts, not an earlier one.
	two, _ := cache.NewKeys([]byte(`{"messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":"second"}]}`), true)
	if two.Text != "second" {
		t.Errorf("Text = %q, want second", two.Text)
	}
}

func TestPartitionID(t *testing.T) {
	t.Parallel()
	base := cache.Partition{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}
	ids := map[cache.PartitionID]cache.Partition{base.ID(): base}
	for _, p := range []cache.Partition{
		{Tenant: "globex", Alias: "fast", Arm: "a", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Arm: "b", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fas", Arm: "ta", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "cheap", Model: "m1", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "main", Model: "m2", Operation: "ai.chatCompletions"},
		{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "main", Model: "m1", Operation: "ai.embeddings"},
		{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "main", Model: "m1", Operation: "ai.chatCompletions", Sensitive: true},
	} {
		if prev, ok := ids[p.ID()]; ok {
			t.Errorf("%+v and %+v share an ID", prev, p)
		}
		ids[p.ID()] = p
	}
	if base.ID() != (cache.Partition{Tenant: "acme", Alias: "fast", Arm: "a", Backend: "main", Model: "m1", Operation: "ai.chatCompletions"}).ID() {
		t.Error("ID not deterministic")
	}
	sk := cache.MakeStoreKey(base.ID(), cache.Key{1})
	if sk.Partition() != base.ID() || sk.Key() != (cache.Key{1}) {
		t.Error("StoreKey halves")
	}
}
