package openaiwire

// extra stores the raw value at d.pos in *m under key, allocating the map
// on first use.
func (d *decoder) extra(m *map[string]string, key []byte) error {
	v, err := d.raw()
	if err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[internKey(key)] = v
	return nil
}

// keepNull records that the typed field key was given as JSON null, just
// read: the null is kept in *m so that it is written back.
func (d *decoder) keepNull(m *map[string]string, key string) {
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[key] = "null"
}

// keptNull consumes a null at d.pos, keeps it in *m under key (see
// keepNull) and reports true; it reports false and consumes nothing when
// the value is not null.
func (d *decoder) keptNull(m *map[string]string, key string) (bool, error) {
	if null, err := d.isNull(); err != nil || !null {
		return false, err
	}
	d.keepNull(m, key)
	return true, nil
}

// nullable reads the member key, at d.pos, of an object whose extra fields
// are *m: null is kept in *m and reads as nil; any other value is read by
// parse, and a null kept under key before is dropped. parse is a method
// value of d (d.usage) or a closure over d: passing d to a function value
// would move the caller's decoder to the heap.
func nullable[T any](d *decoder, m *map[string]string, key string, parse func() (*T, error)) (*T, error) {
	if null, err := d.keptNull(m, key); err != nil || null {
		return nil, err
	}
	v, err := parse()
	if err != nil {
		return nil, err
	}
	delete(*m, key)
	return v, nil
}

// strPtr reads a string at d.pos, for [nullable].
func (d *decoder) strPtr() (*string, error) {
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// boolPtr reads a boolean at d.pos, for [nullable].
func (d *decoder) boolPtr() (*bool, error) {
	b, err := d.bool()
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// int32In reads an integer at d.pos that must lie in [lo, hi]; outside it
// the error (relative to the value) says "must be <what>".
func (d *decoder) int32In(lo, hi int64, what string) (*int32, error) {
	v, err := d.int64()
	if err != nil {
		return nil, err
	}
	if v < lo || v > hi {
		return nil, fieldErr("", "must be %s, got %d", what, v)
	}
	n := int32(v)
	return &n, nil
}
