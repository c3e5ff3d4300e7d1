package grpcproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/tokenfile"
)

// Proxy relays calls to the routed services' backends. Build it with [New];
// it is safe for concurrent use.
type Proxy struct {
	methods  map[string]Method // routed methods by full method
	services map[string]string // routed service → backend name
	backends map[string]*backend
	files    []*protoregistry.Files // each descriptor set's, in order, for reflection
	closed   atomic.Bool
}

// backend is a dialled [Backend].
type backend struct {
	name      string
	external  bool
	conn      *grpc.ClientConn
	authKey   string // lowercased; "" = no credential
	authValue string // static value, when tokenFile is empty
	tokenFile string
	tenantKey string // lowercased identity keys; "" = not sent
	agentKey  string
	sensKey   string
}

// New checks o, loads its descriptor sets and creates one *grpc.ClientConn
// per backend that a service is routed to (dialled lazily, at the first
// call). Errors name the configuration key at fault, e.g.
//
//	ai.grpc.descriptor_sets[1]: x.binpb: not a FileDescriptorSet: ...
//	ai.grpc.descriptor_sets[0]: acme.ocr.v1.OcrService.Recognize: (flexway.v1.operation).ai: price_per_thousand -1 is negative
//	ai.grpc.services.acme.ocr.v1.OcrService: no backend "ocr" in ai.backends
//	ai.grpc.services.acme.ocr.v1.OcrService: not in any descriptor set
//	ai.backends.ocr.tls: ca_file: open /x.pem: no such file or directory
//
// A method carrying (flexway.v1.operation).ai without a metering mode, or
// with a negative or non-finite price, is refused wherever it is defined.
func New(o Options) (_ *Proxy, err error) {
	maxBytes := o.MaxMessageBytes
	switch {
	case maxBytes < 0:
		return nil, fmt.Errorf("max message bytes %d is negative", maxBytes)
	case maxBytes == 0:
		maxBytes = defaultMaxMessageBytes
	}
	defs, files, err := loadDescriptorSets(o.DescriptorSets)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		files:    files,
		methods:  make(map[string]Method),
		services: make(map[string]string, len(o.Services)),
		backends: make(map[string]*backend),
	}
	defer func() {
		if err != nil {
			p.Close() // the connections made so far
		}
	}()
	for _, svc := range sortedKeys(o.Services) {
		name := o.Services[svc]
		key := "ai.grpc.services." + svc
		if _, ok := o.Backends[name]; !ok {
			return nil, fmt.Errorf("%s: no backend %q in ai.backends", key, name)
		}
		def, ok := defs[svc]
		if !ok {
			return nil, fmt.Errorf("%s: not in any descriptor set", key)
		}
		if _, ok := p.backends[name]; !ok {
			b, err := newBackend(name, o.Backends[name], maxBytes)
			if err != nil {
				return nil, err
			}
			p.backends[name] = b
		}
		b := p.backends[name]
		p.services[svc] = name
		for _, m := range def.methods {
			m.Backend, m.External = b.name, b.external
			p.methods[m.FullMethod] = m
		}
	}
	return p, nil
}

// newBackend checks b and creates its client connection.
func newBackend(name string, b Backend, maxBytes int) (*backend, error) {
	key := "ai.backends." + name
	if b.Name != "" && b.Name != name {
		return nil, fmt.Errorf("%s: name %q differs from the key", key, b.Name)
	}
	if b.Target == "" {
		return nil, fmt.Errorf("%s.url: empty gRPC target", key)
	}
	out := &backend{name: name, external: b.External, tokenFile: b.TokenFile, authValue: b.AuthValue}
	var err error
	switch {
	case b.TokenFile != "" && b.AuthValue != "":
		return nil, fmt.Errorf("%s.auth: a token file and a static value exclude each other", key)
	case b.TokenFile != "" && b.AuthHeader == "":
		out.authKey = "authorization"
	case b.TokenFile != "" || b.AuthValue != "" || b.AuthHeader != "":
		if b.TokenFile == "" && b.AuthValue == "" {
			return nil, fmt.Errorf("%s.auth: header %q without a value", key, b.AuthHeader)
		}
		if !httpguts.ValidHeaderFieldValue(b.AuthValue) {
			return nil, fmt.Errorf("%s.auth: the value holds a character not allowed in a header", key)
		}
		if out.authKey, err = metadataKey(b.AuthHeader); err != nil {
			return nil, fmt.Errorf("%s.auth: %w", key, err)
		}
	}
	ids := []struct {
		field string
		name  string
		dst   *string
	}{
		{"tenant", b.IdentityHeaders.Tenant, &out.tenantKey},
		{"agent", b.IdentityHeaders.Agent, &out.agentKey},
		{"sensitive", b.IdentityHeaders.Sensitive, &out.sensKey},
	}
	seen := map[string]string{}
	if out.authKey != "" {
		seen[out.authKey] = "auth"
	}
	for _, id := range ids {
		if id.name == "" {
			continue
		}
		k, err := metadataKey(id.name)
		if err != nil {
			return nil, fmt.Errorf("%s.identity_headers.%s: %w", key, id.field, err)
		}
		if other, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s.identity_headers.%s: header %q is also %s's", key, id.field, k, other)
		}
		seen[k] = id.field
		*id.dst = k
	}
	creds := insecure.NewCredentials()
	if b.TLS != nil {
		cfg, err := b.TLS.config()
		if err != nil {
			return nil, fmt.Errorf("%s.tls: %w", key, err)
		}
		creds = credentials.NewTLS(cfg)
	}
	out.conn, err = grpc.NewClient(b.Target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(Codec()),
			grpc.MaxCallRecvMsgSize(maxBytes),
			grpc.MaxCallSendMsgSize(maxBytes),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("%s.url: %w", key, err)
	}
	return out, nil
}

// Lookup returns the routed method whose gRPC path is fullMethod
// ("/acme.ocr.v1.OcrService/Recognize"); false for a method of an unrouted
// service or one its descriptor does not define.
func (p *Proxy) Lookup(fullMethod string) (Method, bool) {
	m, ok := p.methods[fullMethod]
	return m, ok
}

// Methods returns every routed method, sorted by FullMethod.
func (p *Proxy) Methods() []Method {
	out := make([]Method, 0, len(p.methods))
	for _, k := range sortedKeys(p.methods) {
		out = append(out, p.methods[k])
	}
	return out
}

// Handler returns the grpc.UnknownServiceHandler that relays every routed
// method as raw frames, whatever its streaming shape. It receives each
// caller message with RecvMsg(*Frame) and sends each upstream message with
// SendMsg(*Frame) on the stream it is given, so a wrapping interceptor sees
// every frame; the server must use [Codec].
//
// The upstream call's context derives from the stream's (deadline and
// cancellation included); its metadata is only the backend's credential and
// the caller's identity from [call.FromContext] under the backend's
// IdentityHeaders. The upstream's header metadata, trailer and status reach
// the caller as sent. After the call the handler records
// call.Outcome{Backend, Served} on the call state, if any (other fields of
// the outcome are kept): Served is set when the upstream sent at least one
// message or ended with OK. A call refused before a backend was chosen
// (unknown method, sensitive, shutting down) records nothing.
//
// Errors: UNIMPLEMENTED for an unrouted service or unknown method;
// PERMISSION_DENIED (sensitive_no_internal_backend) for a sensitive call to
// an external backend, before any upstream call; UNAVAILABLE
// (upstream_error) when the backend cannot be reached or its token file
// read; otherwise the upstream's status, or gRPC's own (RESOURCE_EXHAUSTED
// for a message over MaxMessageBytes, DEADLINE_EXCEEDED, CANCELLED).
//
// For a method whose client does not stream (unary, server streaming), the
// handler reads the one request before calling the upstream; a second
// request is never read. When the upstream ends before the caller has
// half-closed a client stream, the handler returns without waiting for the
// caller's next message: a RecvMsg of the stream may still be in progress
// until gRPC finishes the stream (a wrapper must count concurrently
// safely), and what it receives is dropped.
func (p *Proxy) Handler() grpc.StreamHandler { return p.handle }

// bidi is the descriptor of every upstream stream: the proxy relays
// whatever the two ends send, leaving cardinality checks to them.
var bidi = &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

func (p *Proxy) handle(_ any, ss grpc.ServerStream) error {
	full, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method in the stream")
	}
	m, ok := p.methods[full]
	if !ok {
		return p.unimplemented(full)
	}
	b := p.backends[m.Backend]
	ctx := ss.Context()
	st := call.FromContext(ctx)
	if st != nil && st.Sensitive && b.external {
		return faults.New(faults.SensitiveNoInternalBackend,
			"sensitive call: %s is served only by external backend %s", serviceOf(full), b.name)
	}
	if p.closed.Load() {
		return faults.New(faults.Unavailable, "the gateway is shutting down")
	}
	served := false
	if st != nil {
		defer func() {
			o := st.Outcome()
			o.Backend, o.Served = b.name, served
			st.SetOutcome(o)
		}()
	}
	md, err := b.outgoing(st)
	if err != nil {
		return err
	}
	// W3C trace context of Flexway's own span (none without tracing).
	otel.GetTextMapPropagator().Inject(ctx, mdCarrier(md))

	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	defer cancel()

	if !m.ClientStreams {
		// One request: read it before calling the upstream, then relay the
		// answer on this goroutine.
		req := new(Frame)
		err := ss.RecvMsg(req)
		if err != nil && err != io.EOF {
			return err
		}
		up, err2 := b.conn.NewStream(ctx, bidi, full)
		if err2 != nil {
			return b.streamError(err2)
		}
		if err == nil {
			if err := up.SendMsg(req); err != nil && err != io.EOF {
				return err // io.EOF: the upstream ended, RecvMsg has its status
			}
		}
		if err := up.CloseSend(); err != nil {
			return err
		}
		served, err = relayResponses(up, ss)
		return err
	}

	up, err := b.conn.NewStream(ctx, bidi, full)
	if err != nil {
		return b.streamError(err)
	}
	// Caller → upstream, concurrently with upstream → caller below.
	clientDone := make(chan struct{})
	var clientErr error
	go func() {
		err := forwardRequests(ss, up)
		clientErr = err
		close(clientDone)
		if err != nil {
			cancel() // the upstream call ends; its error is superseded
		}
	}()

	served, err = relayResponses(up, ss)
	if err != nil {
		select {
		case <-clientDone:
			if clientErr != nil {
				return clientErr
			}
		default:
		}
	}
	return err
}

// forwardRequests copies the caller's messages upstream until the caller
// half-closes (then half-closes upstream and returns nil) or the upstream
// ends (nil: its status is the call's). Any other error is the call's.
func forwardRequests(ss grpc.ServerStream, up grpc.ClientStream) error {
	for {
		f := new(Frame)
		if err := ss.RecvMsg(f); err != nil {
			if err == io.EOF {
				return up.CloseSend()
			}
			return err
		}
		if err := up.SendMsg(f); err != nil {
			if err == io.EOF {
				return nil // the upstream ended: RecvMsg has its status
			}
			return err
		}
	}
}

// relayResponses copies the upstream's header, messages and trailer to the
// caller and returns the upstream's status (nil for OK) and whether it
// served: sent at least one message or ended with OK.
func relayResponses(up grpc.ClientStream, ss grpc.ServerStream) (served bool, err error) {
	// Header blocks until the upstream sends its header or ends; nil means
	// it ended (a trailers-only response): RecvMsg has the status.
	if hdr, _ := up.Header(); len(hdr) > 0 {
		if err := ss.SendHeader(hdr); err != nil {
			return false, err
		}
	}
	for {
		// A new frame each time: SendMsg may still hold the bytes after it
		// returns (the codec does not copy them).
		f := new(Frame)
		if err := up.RecvMsg(f); err != nil {
			ss.SetTrailer(up.Trailer())
			if err == io.EOF {
				return true, nil
			}
			return served, err
		}
		served = true
		if err := ss.SendMsg(f); err != nil {
			return served, err
		}
	}
}

// outgoing returns the upstream call's metadata: the credential and the
// caller's identity, nothing of the caller's own metadata.
func (b *backend) outgoing(st *call.State) (metadata.MD, error) {
	md := make(metadata.MD, 4)
	if b.authKey != "" {
		v := b.authValue
		if b.tokenFile != "" {
			t, err := tokenfile.Read(b.tokenFile)
			if err != nil {
				return nil, faults.Wrap(faults.UpstreamError, err, "backend "+b.name+": its credential cannot be read")
			}
			v = "Bearer " + t
		}
		md[b.authKey] = []string{v}
	}
	if st != nil {
		if b.tenantKey != "" && st.Tenant != "" {
			md[b.tenantKey] = []string{st.Tenant}
		}
		if b.agentKey != "" && st.Agent != "" {
			md[b.agentKey] = []string{st.Agent}
		}
	}
	if b.sensKey != "" {
		md[b.sensKey] = []string{fmt.Sprint(st != nil && st.Sensitive)}
	}
	return md, nil
}

// streamError maps a failure to open the upstream stream: the backend
// unreachable becomes upstream_error (the transport's message, which may
// name addresses, is kept for logs only); a deadline or cancellation keeps
// its status.
func (b *backend) streamError(err error) error {
	if status.Code(err) == codes.Unavailable {
		return faults.Wrap(faults.UpstreamError, err, "backend "+b.name+" is unavailable")
	}
	return err
}

// unimplemented is gRPC's answer to an unknown service or method.
func (p *Proxy) unimplemented(full string) error {
	svc := serviceOf(full)
	if _, ok := p.services[svc]; ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s for service %s", full[strings.LastIndexByte(full, '/')+1:], svc)
	}
	return status.Errorf(codes.Unimplemented, "unknown service %s", svc)
}

// serviceOf returns the service of a full method "/svc/method".
func serviceOf(full string) string {
	s := strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// Close closes the backends' connections; calls in flight fail, and later
// calls fail with UNAVAILABLE. It returns the connections' Close errors,
// joined; a second Close does nothing and returns nil.
func (p *Proxy) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	for _, name := range sortedKeys(p.backends) {
		if err := p.backends[name].conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mdCarrier is gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
