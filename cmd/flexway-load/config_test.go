package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayConfigsValidate loads both gateway configurations with
// `flexway validate` (bin/flexway, from make build; skipped without it):
// each must load with no error and no warning.
func TestGatewayConfigsValidate(t *testing.T) {
	t.Parallel()
	bin, err := filepath.Abs("../../bin/flexway")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no bin/flexway (make build):", err)
	}
	for name, config := range map[string]string{"gateway": gatewayConfig, "pipeline": pipelineConfig} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path, err := writeGatewayConfig(dir, config, "127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3", "sk-test")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "validate", "--config", path)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), auditKeyEnv+"=k")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ok (0 warnings)") {
				t.Errorf("flexway validate: %v\n%s", err, out)
			}
		})
	}
}
