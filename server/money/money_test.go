package money

import (
	"math"
	"strings"
	"testing"
)

func TestEURToNano(t *testing.T) {
	cases := []struct {
		name string
		eur  float64
		want int64
	}{
		{"zero", 0, 0},
		{"cents exact despite binary floats", 0.15, 150_000_000},
		{"0.1+0.2 rounds at the ninth decimal", 0.1 + 0.2, 300_000_000}, // 0.30000000000000004
		{"whole and half", 2.5, 2_500_000_000},
		{"one nano-euro", 1e-9, 1},
		{"half rounds away from zero", 0.0000000005, 1},
		{"under half rounds down", 0.00000000049, 0},
		{"negative rounds away from zero too", -0.0000000015, -2},
		{"largest", 9_223_372_035, 9_223_372_035_000_000_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := EURToNano(c.eur)
			if err != nil || got != c.want {
				t.Errorf("EURToNano(%v) = %d, %v; want %d", c.eur, got, err, c.want)
			}
		})
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 9_223_372_036, 1e300, -1e300} {
		if got, err := EURToNano(bad); err == nil {
			t.Errorf("EURToNano(%v) = %d, want an error", bad, got)
		}
	}
}

func TestParseEURFixed(t *testing.T) {
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
		got, err := ParseEURFixed(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseEURFixed(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []string{
		"", "0", "0.", "0.00002400", // fewer than 9 decimals
		"0.0000240000", "1.0000000000", // more than 9
		".000024000", "-.000024000", "--0.000024000", "- 0.000024000", "+0.000024000", " 0.000024000", "0.000024000 ",
		"0,000024000", "2.4e-05", "0.00002400a", "1_0.000000000", "0x1.000000000",
		"9223372036.854775808", "9223372037.000000000", "99999999999999999999.000000000",
		"-9223372036.854775808", // math.MinInt64 is written, but its magnitude does not parse
	}
	for _, in := range bad {
		if got, err := ParseEURFixed(in); err == nil {
			t.Errorf("ParseEURFixed(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatEURFixed(t *testing.T) {
	for nano, want := range map[int64]string{
		0: "0.000000000", 24_000: "0.000024000", 1: "0.000000001", 2_500_000_000: "2.500000000",
		-5: "-0.000000005", 1_000_000_000_000: "1000.000000000",
		math.MaxInt64: "9223372036.854775807", math.MinInt64: "-9223372036.854775808",
	} {
		if got := FormatEURFixed(nano); got != want {
			t.Errorf("FormatEURFixed(%d) = %q, want %q", nano, got, want)
		}
	}
	// Every value but math.MinInt64 parses back.
	for _, n := range []int64{0, 1, -1, 999_999_999, 1_000_000_000, 123_456_789_012, math.MaxInt64, -math.MaxInt64} {
		if got, err := ParseEURFixed(FormatEURFixed(n)); err != nil || got != n {
			t.Errorf("round trip of %d via %q: %d, %v", n, FormatEURFixed(n), got, err)
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
		{100_000_000, "0.10"},
		{50_000_000_000, "50.00"},
		{2_512_826_790, "2.51282679"},
		{-1_500_000_000, "-1.50"},
		{-5, "-0.000000005"},
		{math.MaxInt64, "9223372036.854775807"},
		{math.MinInt64, "-9223372036.854775808"},
	}
	for _, c := range cases {
		if got := FormatEUR(c.nano); got != c.want {
			t.Errorf("FormatEUR(%d) = %q, want %q", c.nano, got, c.want)
		}
	}
	// The same amount as the fixed form, less its trailing zeros.
	for _, n := range []int64{0, 1, 999_999_999, 1_000_000_000, 123_456_789_012} {
		s := FormatEUR(n)
		whole, frac, _ := strings.Cut(s, ".")
		if got, err := ParseEURFixed(whole + "." + (frac + "000000000")[:9]); err != nil || got != n {
			t.Errorf("round trip of %d via %q: %d, %v", n, s, got, err)
		}
	}
}
