package config_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flexway/flexway/server/config"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    config.ByteSize
		wantErr bool
	}{
		{name: "plain bytes", in: "1048576", want: 1 << 20},
		{name: "zero", in: "0", want: 0},
		{name: "bytes unit", in: "512B", want: 512},
		{name: "KB decimal", in: "2KB", want: 2000},
		{name: "MB decimal", in: "3MB", want: 3_000_000},
		{name: "GB decimal", in: "1GB", want: 1_000_000_000},
		{name: "KiB binary", in: "2KiB", want: 2048},
		{name: "MiB binary", in: "8MiB", want: 8 * 1024 * 1024},
		{name: "24MiB", in: "24MiB", want: 24 * 1024 * 1024},
		{name: "GiB binary", in: "1GiB", want: 1 << 30},
		{name: "space before unit", in: "8 MiB", want: 8 << 20},
		{name: "surrounding space", in: " 8MiB ", want: 8 << 20},
		{name: "lower-case unit refused", in: "8mib", wantErr: true},
		{name: "unknown unit", in: "8MiBs", wantErr: true},
		{name: "unit only", in: "MiB", wantErr: true},
		{name: "negative", in: "-1", wantErr: true},
		{name: "fraction", in: "1.5MiB", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "overflow", in: "9000000000GiB", wantErr: true},
		{name: "largest int64", in: "9223372036854775807", want: math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.ParseByteSize(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseByteSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		name string
		in   config.ByteSize
		want string
	}{
		{name: "MiB", in: 8 * config.MiB, want: "8MiB"},
		{name: "GiB", in: 2 * config.GiB, want: "2GiB"},
		{name: "KiB", in: 3 * config.KiB, want: "3KiB"},
		{name: "decimal stays bytes", in: config.MB, want: "1000000B"},
		{name: "zero", in: 0, want: "0B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			back, err := config.ParseByteSize(tt.in.String())
			if err != nil || back != tt.in {
				t.Errorf("ParseByteSize(String()) = %d, %v; want %d", back, err, tt.in)
			}
		})
	}
}

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr string
	}{
		{name: "seconds", in: "d: 30s", want: 30 * time.Second},
		{name: "compound", in: "d: 1m30s", want: 90 * time.Second},
		{name: "milliseconds", in: "d: 250ms", want: 250 * time.Millisecond},
		{name: "bare number refused", in: "d: 30", wantErr: `invalid duration "30"`},
		{name: "garbage", in: "d: soon", wantErr: `invalid duration "soon"`},
		{name: "list refused", in: "d: [30s]", wantErr: "expected a duration such as 30s, got a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v struct {
				D config.Duration `yaml:"d"`
			}
			err := yaml.Unmarshal([]byte(tt.in), &v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || v.D.Std() != tt.want {
				t.Errorf("got %v, %v; want %v", v.D, err, tt.want)
			}
		})
	}
}

func TestNanoEUR(t *testing.T) {
	tests := []struct {
		name string
		eur  float64
		want int64
	}{
		{name: "whole euros", eur: 200, want: 200_000_000_000},
		{name: "cents exact despite binary floats", eur: 0.15, want: 150_000_000},
		{name: "0.6", eur: 0.60, want: 600_000_000},
		{name: "0.1+0.2 written as 0.3", eur: 0.3, want: 300_000_000},
		{name: "one nano-euro", eur: 0.000000001, want: 1},
		{name: "half rounds away from zero", eur: 0.0000000005, want: 1},
		{name: "below half rounds down", eur: 0.0000000004, want: 0},
		{name: "half above a whole nano", eur: 1.0000000015, want: 1_000_000_002},
		{name: "negative half rounds away from zero", eur: -0.0000000005, want: -1},
		{name: "zero", eur: 0, want: 0},
		{name: "large", eur: 1_000_000_000, want: 1_000_000_000_000_000_000},
		{name: "NaN saturates", eur: math.NaN(), want: math.MaxInt64},
		{name: "too large saturates", eur: 1e12, want: math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := config.Price{Input: tt.eur, Output: tt.eur}
			if got := p.InputNanoEURPerMTok(); got != tt.want {
				t.Errorf("InputNanoEURPerMTok() = %d, want %d", got, tt.want)
			}
			if got := p.OutputNanoEURPerMTok(); got != tt.want {
				t.Errorf("OutputNanoEURPerMTok() = %d, want %d", got, tt.want)
			}
			got, ok := config.Caps{EURPerMonth: &tt.eur}.NanoEURPerMonth()
			if !ok || got != tt.want {
				t.Errorf("NanoEURPerMonth() = %d, %v; want %d, true", got, ok, tt.want)
			}
		})
	}
	t.Run("no euro cap", func(t *testing.T) {
		if got, ok := (config.Caps{}).NanoEURPerMonth(); ok || got != 0 {
			t.Errorf("NanoEURPerMonth() = %d, %v; want 0, false", got, ok)
		}
	})
}
