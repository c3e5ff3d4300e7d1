package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ByteSize is a size in bytes. In YAML it is a plain integer (1048576) or an
// integer with a unit: B; KB, MB, GB, TB (powers of 1000); KiB, MiB, GiB, TiB
// (powers of 1024), e.g. "8MiB" or "24 MiB".
type ByteSize int64

// The binary and decimal units of [ByteSize].
const (
	Byte ByteSize = 1
	KB   ByteSize = 1000
	MB   ByteSize = 1000 * KB
	GB   ByteSize = 1000 * MB
	TB   ByteSize = 1000 * GB
	KiB  ByteSize = 1024
	MiB  ByteSize = 1024 * KiB
	GiB  ByteSize = 1024 * MiB
	TiB  ByteSize = 1024 * GiB
)

var byteUnits = map[string]ByteSize{
	"B": Byte, "KB": KB, "MB": MB, "GB": GB, "TB": TB,
	"KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
}

// ParseByteSize parses "1048576", "8MiB", "24 MiB" or "1GB" into bytes. It
// fails on a negative or fractional number, an unknown unit (units are case
// sensitive) or a size beyond int64.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult := Byte
	if unit != "" {
		var ok bool
		if mult, ok = byteUnits[unit]; !ok {
			num = ""
		}
	}
	if num == "" {
		return 0, fmt.Errorf("invalid size %q: want bytes or an integer with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 8MiB", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(n) * mult, nil
}

// String formats b with the largest binary unit that divides it exactly
// ("8MiB"), else in bytes ("1000B"); [ParseByteSize] reads it back.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		size ByteSize
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// UnmarshalYAML implements [yaml.Unmarshaler] with [ParseByteSize].
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a size such as 8MiB, got %s", nodeKind(n))
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MarshalYAML implements [yaml.Marshaler] with [ByteSize.String].
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// Duration is a [time.Duration] written in Go syntax ("30s", "1m30s",
// "250ms"). A bare number is refused: its unit would be a guess.
type Duration time.Duration

// Std returns d as a [time.Duration].
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d in Go syntax, e.g. "1m30s".
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML implements [yaml.Unmarshaler] with [time.ParseDuration].
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as 30s, got %s", nodeKind(n))
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want Go syntax such as 30s, 1m30s or 250ms", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements [yaml.Marshaler] with [Duration.String].
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// nodeKind names a node's shape for error messages.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}
