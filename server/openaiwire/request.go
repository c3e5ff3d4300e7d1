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

// openRequest opens the JSON object of an upstream request and writes its
// model first. An empty model (the request names none, and none replaces
// it) is an error.
func openRequest(dst []byte, model string) (object, error) {
	if model == "" {
		return object{}, fieldErr("model", "you must provide a model")
	}
	o := open(dst)
	o.str("model", model)
	return o, nil
}

// closeRequest writes the members every upstream request ends with, user
// when set and then the extra fields, and closes the object. The extra
// fields skipped are model, user when set, and those for which typed
// reports true (the request's own typed fields, written already). An extra
// field value that is not one valid JSON value is an error naming it.
func (o *object) closeRequest(user *string, extra map[string]string, typed func(k string) bool) ([]byte, error) {
	if user != nil {
		o.str("user", *user)
	}
	err := o.extras(extra, func(k string) bool {
		switch k {
		case "model":
			return true
		case "user":
			return user != nil
		}
		return typed(k)
	}, true)
	if err != nil {
		return nil, err
	}
	return o.close(), nil
}
