package main

import (
	"testing"

	"google.golang.org/grpc/codes"

	ocrv1 "github.com/flexway/flexway/examples/ocr/gen/acme/ocr/v1"
)

// TestGovernanceProxied: a proxied specialised model's service is matched
// by its full name; its one backend is held to the backend rules (403
// backend_not_allowed, nothing reserved or committed), and model rules do
// not apply to it (it names no model), even one allowing none.
func TestGovernanceProxied(t *testing.T) {
	addr, _ := startOCR(t)
	set := ocrDescriptorSet(t)
	for _, tc := range []struct {
		name, policies string
		refused        bool
	}{
		{name: "backend not allowed", refused: true, policies: `  policies:
    - name: ocr-in-house-only
      match: {operation: acme.ocr.v1.OcrService, tenant: acme}
      governance: {backends: [chat]}
`},
		{name: "backend allowed", policies: `  policies:
    - name: ocr-allowed
      match: {operation: acme.ocr.v1.OcrService}
      governance: {backends: [ocr]}
`},
		{name: "model rules do not apply", policies: `  policies:
    - name: no-models
      governance: {models: []}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLEXWAY_TEST_ADMIN_KEY", testAdminKey)
			g := startGateway(t, testConfig{
				AdminKey: true,
				Keys:     []testKey{acmeBot},
				Backend:  "chat",
				Budget:   "    default: {eur_per_month: 1}",
				GRPCServices: &testGRPC{DescriptorSets: []string{set},
					Services: map[string]string{"acme.ocr.v1.OcrService": "ocr"}},
				Backends: []testBackend{
					{Name: "chat", URL: "http://127.0.0.1:1/v1", Internal: true},
					{Name: "ocr", Kind: "grpc", URL: addr, Internal: true, Auth: "{type: none}"},
				},
				AI: tc.policies,
			}.yaml())
			rec, err := ocrv1.NewOcrServiceClient(grpcConn(t, g)).Recognize(withKey(t, demoKey), &ocrv1.RecognizeRequest{Image: make([]byte, 10)})
			u := usageOf(t, g, "")["eur_per_month"]
			if !tc.refused {
				if err != nil || rec.GetText() != "10 bytes" || u.Committed == 0 {
					t.Fatalf("Recognize: %v, %v; usage %+v", rec, err, u)
				}
				return
			}
			if c, reason, _, msg := grpcReason(err); c != codes.PermissionDenied || reason != "backend_not_allowed" || msg == "" {
				t.Fatalf("Recognize: %v, want PERMISSION_DENIED backend_not_allowed", err)
			}
			if u.Committed != 0 || u.Reserved != 0 {
				t.Fatalf("a refused call left %+v", u)
			}
		})
	}
}
