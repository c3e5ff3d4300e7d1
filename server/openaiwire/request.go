package openaiwire

// clientResult returns v, or, when err is set, the zero T and err as the
// client is told it (see clientError): the last step of the exported
// parsers of client requests.
func clientResult[T any](v T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, clientError(err)
	}
	return v, nil
}

// request parses d's document, a client's request body, reading the
// members every request has: model (required, non-empty) into *model,
// user (a string or null) into *user, and member's into the request: member
// reads the value of key at d.pos, as members' each does, and reports false,
// reading nothing, for a key the request does not model. Every other
// member is kept raw in *extra.
func (d *decoder) request(model *string, user **string, extra *map[string]string, member func(key []byte) (bool, error)) error {
	err := d.document("the request body", func(key []byte) (err error) {
		switch string(key) {
		case "model":
			*model, err = d.str()
		case "user":
			*user, err = nullable(d, extra, "user", d.strPtr)
		default:
			modelled, err := member(key)
			if err == nil && !modelled {
				err = d.extra(extra, key)
			}
			return err
		}
		return err
	})
	if err != nil {
		return err
	}
	if *model == "" {
		return fieldErr("model", "you must provide a model")
	}
	return nil
}
