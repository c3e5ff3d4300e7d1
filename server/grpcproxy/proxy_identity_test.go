package grpcproxy_test

import (
	"os"
	"slices"
	"sort"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/grpcproxy"
)

// extraKeys returns md's keys that gRPC itself does not set.
func extraKeys(md metadata.MD) []string {
	var keys []string
	for k := range md {
		switch k {
		case ":authority", "content-type", "user-agent", "grpc-accept-encoding", "grpc-timeout":
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestCallerMetadataIsNotCopied(t *testing.T) {
	up := newUpstream()
	o := routed(t, startUpstream(t, up))
	o.Backends["up"] = grpcproxy.Backend{
		Target: o.Backends["up"].Target, AuthHeader: "Authorization", AuthValue: "Bearer backend-secret",
		IdentityHeaders: grpcproxy.IdentityHeaders{Tenant: "Flexway-Tenant", Agent: "flexway-agent", Sensitive: "flexway-sensitive"},
	}
	f := startFront(t, o)
	ctx := metadata.AppendToOutgoingContext(ctxT(t),
		"authorization", "Bearer caller-key", "x-caller-secret", "s3cr3t", "flexway-tenant", "forged",
		"test-tenant", "acme", "test-agent", "support-bot")
	if _, err := f.client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	md := up.lastMD()
	want := map[string][]string{
		"authorization":     {"Bearer backend-secret"},
		"flexway-tenant":    {"acme"},
		"flexway-agent":     {"support-bot"},
		"flexway-sensitive": {"false"},
	}
	if got := extraKeys(md); !slices.Equal(got, []string{"authorization", "flexway-agent", "flexway-sensitive", "flexway-tenant"}) {
		t.Errorf("upstream metadata keys = %v (all: %v)", got, md)
	}
	for k, v := range want {
		if !slices.Equal(md.Get(k), v) {
			t.Errorf("upstream %s = %q, want %q", k, md.Get(k), v)
		}
	}
}

func TestNoIdentityHeadersSendsNothingOfTheCaller(t *testing.T) {
	up := newUpstream()
	f := startFront(t, routed(t, startUpstream(t, up)))
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer caller-key", "test-tenant", "acme")
	if _, err := f.client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := extraKeys(up.lastMD()); len(got) != 0 {
		t.Errorf("upstream received %v, want no metadata beyond gRPC's own", got)
	}
}

func TestTokenFileIsReadAtEveryCall(t *testing.T) {
	up := newUpstream()
	o := routed(t, startUpstream(t, up))
	tok := writeFile(t, "token", []byte("first\n"))
	o.Backends["up"] = grpcproxy.Backend{Target: o.Backends["up"].Target, TokenFile: tok}
	f := startFront(t, o)
	for _, want := range []string{"first", "second"} {
		if want == "second" {
			if err := os.WriteFile(tok, []byte("  second "), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := up.lastMD().Get("authorization"); !slices.Equal(got, []string{"Bearer " + want}) {
			t.Errorf("authorization = %q, want Bearer %s", got, want)
		}
	}
	if err := os.Remove(tok); err != nil {
		t.Fatal(err)
	}
	calls := up.calls.Load()
	_, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{})
	wantFault(t, err, codes.Unavailable, faults.UpstreamError)
	if up.calls.Load() != calls {
		t.Error("a call without its token reached the upstream")
	}
}

// wantFault checks a gateway refusal: its code and ErrorInfo reason.
func wantFault(t *testing.T, err error, code codes.Code, reason faults.Reason) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("code = %v (%v), want %v", st.Code(), err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.GetReason() != string(reason) || info.GetDomain() != faults.Domain {
				t.Errorf("ErrorInfo = %s/%s, want %s/%s", info.GetDomain(), info.GetReason(), faults.Domain, reason)
			}
			return
		}
	}
	t.Errorf("no ErrorInfo in %v", st.Details())
}

func TestSensitiveCallToExternalBackendIsRefused(t *testing.T) {
	up := newUpstream()
	o := routed(t, startUpstream(t, up))
	o.Backends["up"] = grpcproxy.Backend{Target: o.Backends["up"].Target, External: true}
	f := startFront(t, o)

	ctx := metadata.AppendToOutgoingContext(ctxT(t), "test-sensitive", "1")
	_, err := f.client.UnaryCall(ctx, &testpb.SimpleRequest{})
	wantFault(t, err, codes.PermissionDenied, faults.SensitiveNoInternalBackend)
	stream, err := f.client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	wantFault(t, err, codes.PermissionDenied, faults.SensitiveNoInternalBackend)
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("upstream calls = %d, want 0", n)
	}
	if got := f.state(t).Outcome(); got.Served {
		t.Errorf("outcome = %+v, want not served", got)
	}
	// The same call, not sensitive, goes through.
	if _, err := f.client.UnaryCall(ctxT(t), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
}

func TestSensitiveCallToInternalBackendPasses(t *testing.T) {
	up := newUpstream()
	o := routed(t, startUpstream(t, up))
	o.Backends["up"] = grpcproxy.Backend{Target: o.Backends["up"].Target, IdentityHeaders: grpcproxy.IdentityHeaders{Sensitive: "x-sensitive"}}
	f := startFront(t, o)
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "test-sensitive", "1")
	if _, err := f.client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := up.lastMD().Get("x-sensitive"); !slices.Equal(got, []string{"true"}) {
		t.Errorf("x-sensitive = %q, want [true]", got)
	}
}
