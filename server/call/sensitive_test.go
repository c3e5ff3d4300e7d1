package call_test

import (
	"testing"

	"github.com/flexway/flexway/server/call"
)

func TestSensitiveValue(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   bool
	}{
		{"none", nil, false},
		{"true", []string{"true"}, true},
		{"TRUE", []string{"TRUE"}, true},
		{"1", []string{"1"}, true},
		{"spaces", []string{" true "}, true},
		{"false", []string{"false"}, false},
		{"0", []string{"0"}, false},
		{"yes is no flag", []string{"yes"}, false},
		{"merged line", []string{"false, true"}, true},
		{"repeated lines", []string{"false", "1"}, true},
		{"empty", []string{""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := call.SensitiveValue(tt.values); got != tt.want {
				t.Fatalf("SensitiveValue(%q) = %v, want %v", tt.values, got, tt.want)
			}
		})
	}
}
