package requestid

import (
	"regexp"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		want bool
	}{
		{"short", "r-1", true},
		{"every printable", "!~azAZ09{}", true},
		{"at the bound", strings.Repeat("a", MaxBytes), true},
		{"empty", "", false},
		{"over the bound", strings.Repeat("a", MaxBytes+1), false},
		{"space", "a b", false},
		{"tab", "a\tb", false},
		{"newline", "a\nb", false},
		{"delete", "a\x7fb", false},
		{"non-ASCII", "é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Valid(tc.id); got != tc.want {
				t.Errorf("Valid(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	shape := regexp.MustCompile(`^req_[0-9a-f]{24}$`)
	a, b := New(), New()
	if !shape.MatchString(a) || !Valid(a) {
		t.Errorf("New() = %q, want req_ and 24 hex digits", a)
	}
	if a == b {
		t.Errorf("two New() gave %q", a)
	}
	if got := OrNew("mine"); got != "mine" {
		t.Errorf("OrNew(mine) = %q", got)
	}
	if got := OrNew("not mine"); !shape.MatchString(got) {
		t.Errorf("OrNew(%q) = %q, want a new id", "not mine", got)
	}
}
