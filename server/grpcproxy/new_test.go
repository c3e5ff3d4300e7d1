package grpcproxy_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/grpcproxy"
)

// method is a method of the fake acme.ocr.v1.OcrService, with op as its
// (flexway.v1.operation) option when not nil.
func method(name string, op *flexwayv1.Operation, clientStreams, serverStreams bool) *descriptorpb.MethodDescriptorProto {
	m := &descriptorpb.MethodDescriptorProto{
		Name:            proto.String(name),
		InputType:       proto.String(".acme.ocr.v1.Req"),
		OutputType:      proto.String(".acme.ocr.v1.Resp"),
		ClientStreaming: proto.Bool(clientStreams),
		ServerStreaming: proto.Bool(serverStreams),
	}
	if op != nil {
		m.Options = &descriptorpb.MethodOptions{}
		proto.SetExtension(m.Options, flexwayv1.E_Operation, op)
	}
	return m
}

func ai(m flexwayv1.AI_Metering, price float64, feature string) *flexwayv1.Operation {
	return &flexwayv1.Operation{Ai: &flexwayv1.AI{Metering: m, PricePerThousand: price, Feature: feature}}
}

// ocrSet writes a descriptor set of acme.ocr.v1.OcrService with methods.
func ocrSet(tb testing.TB, methods ...*descriptorpb.MethodDescriptorProto) string {
	tb.Helper()
	f := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("acme/ocr/v1/ocr.proto"),
		Package: proto.String("acme.ocr.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req")}, {Name: proto.String("Resp")},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("OcrService"), Method: methods}},
	}
	return writeSet(tb, "ocr.binpb", &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{f}})
}

func TestLookupReadsTheOperationOption(t *testing.T) {
	set := ocrSet(t,
		method("Recognize", ai(flexwayv1.AI_PER_CALL, 0.15, "ocr"), false, false),
		method("Classify", &flexwayv1.Operation{Name: "ocr.classify", Ai: &flexwayv1.AI{Metering: flexwayv1.AI_PER_BYTE, PricePerThousand: 0.0000000015, Feature: "classify"}}, false, false),
		method("Transcribe", ai(flexwayv1.AI_PER_BYTE, 2, "speech"), true, true),
		method("Health", nil, false, false),
		method("Named", &flexwayv1.Operation{Name: "ocr.named"}, false, true),
		method("Free", ai(flexwayv1.AI_PER_CALL, 0, "free"), true, false),
	)
	p, err := grpcproxy.New(grpcproxy.Options{
		DescriptorSets: []string{testingSet(t), set},
		Services:       map[string]string{"acme.ocr.v1.OcrService": "ocr", "grpc.testing.TestService": "test"},
		Backends: map[string]grpcproxy.Backend{
			"ocr":  {Name: "ocr", Target: "dns:///ocr.internal:9000", External: true},
			"test": {Target: "127.0.0.1:1"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const svc = "/acme.ocr.v1.OcrService/"
	want := map[string]grpcproxy.Method{
		"Recognize":  {FullMethod: svc + "Recognize", Backend: "ocr", External: true, Metering: grpcproxy.PerCall, NanoEURPerThousand: 150_000_000, Feature: "ocr"},
		"Classify":   {FullMethod: svc + "Classify", Backend: "ocr", External: true, Operation: "ocr.classify", Metering: grpcproxy.PerByte, NanoEURPerThousand: 2, Feature: "classify"},
		"Transcribe": {FullMethod: svc + "Transcribe", Backend: "ocr", External: true, Metering: "per_byte", NanoEURPerThousand: 2_000_000_000, Feature: "speech", ClientStreams: true, ServerStreams: true},
		"Health":     {FullMethod: svc + "Health", Backend: "ocr", External: true},
		"Named":      {FullMethod: svc + "Named", Backend: "ocr", External: true, Operation: "ocr.named", ServerStreams: true},
		"Free":       {FullMethod: svc + "Free", Backend: "ocr", External: true, Metering: "per_call", Feature: "free", ClientStreams: true},
	}
	for name, w := range want {
		got, ok := p.Lookup(svc + name)
		if !ok {
			t.Errorf("Lookup(%s): not found", name)
			continue
		}
		if d := cmp.Diff(w, got); d != "" {
			t.Errorf("Lookup(%s) (-want +got):\n%s", name, d)
		}
	}
	got, ok := p.Lookup("/grpc.testing.TestService/FullDuplexCall")
	if w := (grpcproxy.Method{FullMethod: "/grpc.testing.TestService/FullDuplexCall", Backend: "test", ClientStreams: true, ServerStreams: true}); !ok || got != w {
		t.Errorf("Lookup(FullDuplexCall) = %+v, %v; want %+v", got, ok, w)
	}
	for _, m := range []string{"/grpc.testing.ReconnectService/Start", svc + "Nope", "/acme.ocr.v1.OcrService", "", "Recognize"} {
		if got, ok := p.Lookup(m); ok {
			t.Errorf("Lookup(%q) = %+v, want not found", m, got)
		}
	}
	// Methods lists the routed ones only: 6 of OcrService, 8 of TestService.
	ms := p.Methods()
	if len(ms) != 14 || ms[0].FullMethod != svc+"Classify" || ms[13].FullMethod != "/grpc.testing.TestService/UnimplementedCall" {
		t.Errorf("Methods() = %d methods, first %q, last %q", len(ms), ms[0].FullMethod, ms[len(ms)-1].FullMethod)
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	testSet := testingSet(t)
	garbage := writeFile(t, "garbage.binpb", []byte("this is not a descriptor set\n"))
	empty := writeFile(t, "empty.binpb", nil)
	dup := writeSet(t, "dup.binpb", &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		{Name: proto.String("a.proto"), Package: proto.String("a"), MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}, {Name: proto.String("M")}}},
	}})
	negative := ocrSet(t, method("Recognize", ai(flexwayv1.AI_PER_CALL, -1, "ocr"), false, false))
	unmetered := ocrSet(t, method("Recognize", &flexwayv1.Operation{Ai: &flexwayv1.AI{PricePerThousand: 1}}, false, false))
	unknownMode := ocrSet(t, method("Recognize", ai(flexwayv1.AI_Metering(7), 1, ""), false, false))
	nan := ocrSet(t, method("Recognize", ai(flexwayv1.AI_PER_BYTE, math.NaN(), ""), false, false))
	huge := ocrSet(t, method("Recognize", ai(flexwayv1.AI_PER_BYTE, 1e12, ""), false, false))
	otherOcr := ocrSet(t, method("Other", nil, false, false))
	goodOcr := ocrSet(t, method("Recognize", nil, false, false))

	ok := func() grpcproxy.Options {
		return grpcproxy.Options{
			DescriptorSets: []string{testSet, goodOcr},
			Services:       map[string]string{"acme.ocr.v1.OcrService": "ocr"},
			Backends:       map[string]grpcproxy.Backend{"ocr": {Target: "127.0.0.1:1"}},
		}
	}
	backend := func(b grpcproxy.Backend) func(*grpcproxy.Options) {
		return func(o *grpcproxy.Options) { o.Backends["ocr"] = b }
	}
	cases := []struct {
		name string
		edit func(*grpcproxy.Options)
		want string // the whole error, or its prefix when it ends with "…"
	}{
		{"garbage set", func(o *grpcproxy.Options) { o.DescriptorSets[1] = garbage },
			"ai.grpc.descriptor_sets[1]: " + garbage + ": not a FileDescriptorSet: …"},
		{"empty set", func(o *grpcproxy.Options) { o.DescriptorSets[1] = empty },
			"ai.grpc.descriptor_sets[1]: " + empty + ": not a FileDescriptorSet: no file"},
		{"missing set", func(o *grpcproxy.Options) { o.DescriptorSets[0] = "/nonexistent/x.binpb" },
			"ai.grpc.descriptor_sets[0]: /nonexistent/x.binpb: open /nonexistent/x.binpb: no such file or directory"},
		{"invalid files", func(o *grpcproxy.Options) { o.DescriptorSets = append(o.DescriptorSets, dup) },
			"ai.grpc.descriptor_sets[2]: " + dup + ": not a valid FileDescriptorSet: …"},
		{"negative price", func(o *grpcproxy.Options) { o.DescriptorSets = []string{negative} },
			"ai.grpc.descriptor_sets[0]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: price_per_thousand -1 is negative"},
		{"no metering", func(o *grpcproxy.Options) { o.DescriptorSets = []string{testSet, unmetered} },
			"ai.grpc.descriptor_sets[1]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: metering is not set (PER_CALL or PER_BYTE)"},
		{"unknown metering", func(o *grpcproxy.Options) { o.DescriptorSets = []string{unknownMode} },
			"ai.grpc.descriptor_sets[0]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: metering 7 is not PER_CALL or PER_BYTE"},
		{"NaN price", func(o *grpcproxy.Options) { o.DescriptorSets = []string{nan} },
			"ai.grpc.descriptor_sets[0]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: price_per_thousand NaN: not a number"},
		{"huge price", func(o *grpcproxy.Options) { o.DescriptorSets = []string{huge} },
			"ai.grpc.descriptor_sets[0]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: price_per_thousand 1e+12: too large"},
		{"service defined twice differently", func(o *grpcproxy.Options) { o.DescriptorSets = append(o.DescriptorSets, otherOcr) },
			"ai.grpc.descriptor_sets[2]: " + otherOcr + ": service acme.ocr.v1.OcrService differs from its definition in ai.grpc.descriptor_sets[1]"},
		{"unknown backend", func(o *grpcproxy.Options) { o.Services["acme.ocr.v1.OcrService"] = "nope" },
			`ai.grpc.services.acme.ocr.v1.OcrService: no backend "nope" in ai.backends`},
		{"service in no set", func(o *grpcproxy.Options) { o.Services["acme.speech.v1.Speech"] = "ocr" },
			"ai.grpc.services.acme.speech.v1.Speech: not in any descriptor set"},
		{"negative max", func(o *grpcproxy.Options) { o.MaxMessageBytes = -1 }, "max message bytes -1 is negative"},
		{"name differs", backend(grpcproxy.Backend{Name: "other", Target: "x:1"}), `ai.backends.ocr: name "other" differs from the key`},
		{"no target", backend(grpcproxy.Backend{}), "ai.backends.ocr.url: empty gRPC target"},
		{"token file and value", backend(grpcproxy.Backend{Target: "x:1", TokenFile: "/t", AuthHeader: "authorization", AuthValue: "Bearer x"}),
			"ai.backends.ocr.auth: a token file and a static value exclude each other"},
		{"header without value", backend(grpcproxy.Backend{Target: "x:1", AuthHeader: "api-key"}), `ai.backends.ocr.auth: header "api-key" without a value`},
		{"value without header", backend(grpcproxy.Backend{Target: "x:1", AuthValue: "k"}), "ai.backends.ocr.auth: empty header name"},
		{"reserved auth header", backend(grpcproxy.Backend{Target: "x:1", AuthHeader: "grpc-timeout", AuthValue: "1S"}),
			`ai.backends.ocr.auth: header name "grpc-timeout" is reserved by gRPC`},
		{"bad identity header", backend(grpcproxy.Backend{Target: "x:1", IdentityHeaders: grpcproxy.IdentityHeaders{Agent: "x agent"}}),
			`ai.backends.ocr.identity_headers.agent: header name "x agent": invalid character ' '`},
		{"binary identity header", backend(grpcproxy.Backend{Target: "x:1", IdentityHeaders: grpcproxy.IdentityHeaders{Tenant: "tenant-bin"}}),
			`ai.backends.ocr.identity_headers.tenant: header name "tenant-bin" is a binary header`},
		{"identity header is auth's", backend(grpcproxy.Backend{Target: "x:1", TokenFile: "/t", IdentityHeaders: grpcproxy.IdentityHeaders{Tenant: "Authorization"}}),
			`ai.backends.ocr.identity_headers.tenant: header "authorization" is also auth's`},
		{"identity headers collide", backend(grpcproxy.Backend{Target: "x:1", IdentityHeaders: grpcproxy.IdentityHeaders{Tenant: "who", Sensitive: "WHO"}}),
			`ai.backends.ocr.identity_headers.sensitive: header "who" is also tenant's`},
		{"missing CA", backend(grpcproxy.Backend{Target: "x:1", TLS: &grpcproxy.TLS{CAFile: "/nonexistent/ca.pem"}}),
			"ai.backends.ocr.tls: ca_file: open /nonexistent/ca.pem: no such file or directory"},
		{"CA not PEM", backend(grpcproxy.Backend{Target: "x:1", TLS: &grpcproxy.TLS{CAFile: garbage}}),
			"ai.backends.ocr.tls: ca_file " + garbage + ": no PEM certificate in it"},
		{"cert without key", backend(grpcproxy.Backend{Target: "x:1", TLS: &grpcproxy.TLS{CertFile: garbage}}),
			"ai.backends.ocr.tls: cert_file is set without key_file"},
		{"bad key pair", backend(grpcproxy.Backend{Target: "x:1", TLS: &grpcproxy.TLS{CertFile: garbage, KeyFile: garbage}}),
			"ai.backends.ocr.tls: cert_file " + garbage + " with key_file " + garbage + ": …"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ok()
			c.edit(&o)
			p, err := grpcproxy.New(o)
			if err == nil {
				p.Close()
				t.Fatalf("New accepted it; want %q", c.want)
			}
			if prefix, cut := strings.CutSuffix(c.want, "…"); cut {
				if !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("error = %q, want prefix %q", err, prefix)
				}
			} else if err.Error() != c.want {
				t.Errorf("error = %q\n       want %q", err, c.want)
			}
		})
	}
	// The base configuration itself is accepted: the cases above fail for
	// their edit alone.
	p, err := grpcproxy.New(ok())
	if err != nil {
		t.Fatalf("base configuration: %v", err)
	}
	p.Close()
}

func TestSameServiceInTwoSetsIsAccepted(t *testing.T) {
	a := ocrSet(t, method("Recognize", ai(flexwayv1.AI_PER_CALL, 1, "ocr"), false, false))
	b := ocrSet(t, method("Recognize", ai(flexwayv1.AI_PER_CALL, 1, "ocr"), false, false))
	p, err := grpcproxy.New(grpcproxy.Options{
		DescriptorSets: []string{a, b},
		Services:       map[string]string{"acme.ocr.v1.OcrService": "ocr"},
		Backends:       map[string]grpcproxy.Backend{"ocr": {Target: "x:1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if m, ok := p.Lookup("/acme.ocr.v1.OcrService/Recognize"); !ok || m.NanoEURPerThousand != 1_000_000_000 {
		t.Errorf("Lookup = %+v, %v", m, ok)
	}
}

func TestNewWithNothingRoutedProxiesNothing(t *testing.T) {
	p, err := grpcproxy.New(grpcproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if m, ok := p.Lookup("/grpc.testing.TestService/UnaryCall"); ok {
		t.Errorf("Lookup = %+v, want not found", m)
	}
	if n := len(p.Methods()); n != 0 {
		t.Errorf("Methods() = %d methods, want 0", n)
	}
}
