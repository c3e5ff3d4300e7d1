package identity

// Option configures the identity interceptors.
type Option func(*options)

type options struct {
	namer OperationNamer
}

var defaultOptions = options{
	namer: func(fullMethod string) string { return fullMethod },
}

// WithOperationNamer sets how a method is named in the call's state; the
// default is the full gRPC method.
func WithOperationNamer(n OperationNamer) Option {
	return func(o *options) { o.namer = n }
}

func evaluate(opts []Option) *options {
	o := defaultOptions
	for _, f := range opts {
		f(&o)
	}
	return &o
}
