package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/config"
)

// validateCase is one edit of a valid configuration and the one problem
// it must cause.
type validateCase struct {
	name        string
	edit        func(c *config.Config)
	wantPath    string
	wantText    string
	wantWarning bool
}

// runValidateCases applies each case's edit to a fresh valid(t) and checks
// that Validate reports the problem at its path, with its text, as an error
// or (alone) as a warning.
func runValidateCases(t *testing.T, valid func(t *testing.T) *config.Config, tests []validateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid(t)
			tt.edit(c)
			warnings, err := c.Validate()
			var errs config.Problems
			if err != nil && !errors.As(err, &errs) {
				t.Fatalf("Validate error is %T, want config.Problems", err)
			}
			got := errs
			if tt.wantWarning {
				if err != nil {
					t.Errorf("a warning alone must not fail validation: %v", err)
				}
				got = warnings
			}
			p := findProblem(t, got, tt.wantPath)
			if p.Warning != tt.wantWarning {
				t.Errorf("Warning = %v, want %v", p.Warning, tt.wantWarning)
			}
			if !strings.Contains(p.Error(), tt.wantText) {
				t.Errorf("Error() = %q, want it to contain %q", p.Error(), tt.wantText)
			}
			if tt.wantWarning && !strings.HasPrefix(p.Error(), "warning: ") {
				t.Errorf("Error() = %q, want a warning: prefix", p.Error())
			}
		})
	}
}
