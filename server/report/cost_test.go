package report

import (
	"math"
	"testing"
)

func TestParseCost(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0.000000000", 0},
		{"0.000000001", 1},
		{"0.000024000", 24_000},
		{"2.500000000", 2_500_000_000},
		{"00.000000007", 7},
		{"9223372036.854775807", math.MaxInt64},
		{"-0.000024000", -24_000},
		{"-9223372036.854775807", -math.MaxInt64},
	}
	for _, c := range good {
		got, err := ParseCost(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseCost(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []string{
		"", "0", "0.", "0.00002400", // fewer than 9 decimals
		"0.0000240000", "1.0000000000", // more than 9
		".000024000", "-.000024000", "--0.000024000", "- 0.000024000", "+0.000024000", " 0.000024000", "0.000024000 ",
		"0,000024000", "2.4e-05", "0.00002400a", "1_0.000000000", "0x1.000000000",
		"9223372036.854775808", "9223372037.000000000", "99999999999999999999.000000000",
	}
	for _, in := range bad {
		if got, err := ParseCost(in); err == nil {
			t.Errorf("ParseCost(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatEUR(t *testing.T) {
	cases := []struct {
		nano int64
		want string
	}{
		{0, "0.00"},
		{1, "0.000000001"},
		{24_000, "0.000024"},
		{10_000_000, "0.01"},
		{50_000_000_000, "50.00"},
		{2_512_826_790, "2.51282679"},
		{-1_500_000_000, "-1.50"},
		{math.MaxInt64, "9223372036.854775807"},
		{math.MinInt64, "-9223372036.854775808"},
	}
	for _, c := range cases {
		if got := FormatEUR(c.nano); got != c.want {
			t.Errorf("FormatEUR(%d) = %q, want %q", c.nano, got, c.want)
		}
	}
	// Round trip with the audit's 9-decimal form.
	for _, n := range []int64{0, 1, 999_999_999, 1_000_000_000, 123_456_789_012} {
		s := FormatEUR(n)
		whole, frac := s[:len(s)-len(s[indexDot(s)+1:])-1], s[indexDot(s)+1:]
		for len(frac) < 9 {
			frac += "0"
		}
		if got, err := ParseCost(whole + "." + frac); err != nil || got != n {
			t.Errorf("round trip of %d via %q: %d, %v", n, s, got, err)
		}
	}
}

func indexDot(s string) int {
	for i := range s {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}
