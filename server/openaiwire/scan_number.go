package openaiwire

import (
	"math"
	"strconv"
)

// number validates the number at d.pos, moves past it and returns its
// span and whether it is written as an integer (no fraction, no exponent).
func (d *decoder) number() (start, end int, integer bool, err error) {
	data := d.data
	i := d.pos
	start = i
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		d.pos = i
		return 0, 0, false, d.unexpected("in number")
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		for i++; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	default:
		d.pos = i
		return 0, 0, false, d.unexpected("in number")
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		integer = false
		i++
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, 0, false, d.unexpected("after decimal point in number")
		}
		for ; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer = false
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			d.pos = i
			return 0, 0, false, d.unexpected("in exponent of number")
		}
		for ; i < len(data) && '0' <= data[i] && data[i] <= '9'; i++ {
		}
	}
	d.pos = i
	return start, i, integer, nil
}

// int64 reads an integer at d.pos. Integral numbers written with a fraction
// or an exponent are accepted; other numbers, and values out of the int64
// range, are a *fieldError.
func (d *decoder) int64() (int64, error) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, d.typeErr("an integer")
	}
	start, end, integer, err := d.number()
	if err != nil {
		return 0, err
	}
	raw := d.data[start:end]
	if integer {
		neg := raw[0] == '-'
		if neg {
			raw = raw[1:]
		}
		var u uint64
		for _, c := range raw {
			if u > (math.MaxUint64-9)/10 {
				return 0, fieldErr("", "integer %s is out of range", d.data[start:end])
			}
			u = u*10 + uint64(c-'0')
		}
		switch {
		case !neg && u <= math.MaxInt64:
			return int64(u), nil
		case neg && u <= 1<<63:
			return -int64(u), nil // -(1<<63) wraps to itself, MinInt64
		}
		return 0, fieldErr("", "integer %s is out of range", d.data[start:end])
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) {
		return 0, fieldErr("", "expected an integer, got %s", raw)
	}
	if f < -(1<<63) || f >= 1<<63 {
		return 0, fieldErr("", "integer %s is out of range", raw)
	}
	return int64(f), nil
}

// int32 reads an integer in the int32 range at d.pos.
func (d *decoder) int32() (int32, error) {
	start := d.pos
	v, err := d.int64()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fieldErr("", "integer %s is out of range", d.data[start:d.pos])
	}
	return int32(v), nil
}

// float64 reads a number at d.pos.
func (d *decoder) float64() (float64, error) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, d.typeErr("a number")
	}
	start, end, _, err := d.number()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(d.data[start:end]), 64)
	if err != nil {
		// Only a magnitude beyond float64 fails on a valid JSON number.
		return 0, fieldErr("", "number %s is out of range", d.data[start:end])
	}
	return f, nil
}
