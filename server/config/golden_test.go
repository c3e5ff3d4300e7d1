package config_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexway/flexway/server/config"
)

var update = flag.Bool("update", false, "rewrite testdata/broken/*.golden from the current output")

// TestValidateGolden pins what `flexway validate` prints for each broken
// configuration under testdata/broken: file, line, key path and wording,
// through the function validate prints with. The absolute directory of the
// files (in token-file messages) reads $DIR. Run with -update to rewrite
// the goldens, then read the diff.
func TestValidateGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "broken", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 12 {
		t.Fatalf("%d broken configurations, want at least 12", len(files))
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "broken"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			_, warnings, err := config.Load(file)
			var out bytes.Buffer
			config.PrintProblems(&out, warnings, err)
			got := strings.ReplaceAll(out.String(), dir, "$DIR")
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("validate output differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}
