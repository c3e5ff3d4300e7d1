package grpcproxy

import (
	"errors"
	"fmt"
	"os"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/flexway/flexway/server/money"
)

// Metering modes of [Method.Metering].
const (
	// PerCall charges NanoEURPerThousand nano-euros per 1,000 calls.
	PerCall = "per_call"
	// PerByte charges NanoEURPerThousand nano-euros per 1,000 bytes of
	// request and response messages.
	PerByte = "per_byte"
)

// Method is a routed method, as [Proxy.Lookup] returns it.
type Method struct {
	// FullMethod is the gRPC method path, "/acme.ocr.v1.OcrService/Recognize".
	FullMethod string
	// Backend is the name of the backend that serves the method's service.
	Backend string
	// External is the backend's External flag: a sensitive call to the
	// method is refused.
	External bool
	// Operation is the (flexway.v1.operation).name option, or "" when the
	// method does not carry one.
	Operation string
	// Metering is "" (not metered: the method carries no
	// (flexway.v1.operation).ai option), [PerCall] or [PerByte].
	Metering string
	// NanoEURPerThousand is price_per_thousand in nano-euros (converted
	// exactly from the option's shortest decimal text, rounded half away
	// from zero at the ninth decimal): the price of 1,000 calls (PerCall) or
	// of 1,000 bytes (PerByte). Never negative; 0 when not metered.
	NanoEURPerThousand int64
	// Feature is the option's feature ("ocr"), for audit lines and metrics.
	Feature string
	// ClientStreams and ServerStreams are the method's streaming shape: both
	// false for a unary method.
	ClientStreams, ServerStreams bool
}

// service is one service found in the descriptor sets.
type service struct {
	set     int // index in Options.DescriptorSets
	desc    *descriptorpb.ServiceDescriptorProto
	methods map[string]Method // by method name; Backend and External unset
}

// loadDescriptorSets reads every set and returns the services they define,
// by full name, and each set's files, in the order of paths (for
// reflection). Errors start with the set's key, ai.grpc.descriptor_sets[i].
func loadDescriptorSets(paths []string) (map[string]*service, []*protoregistry.Files, error) {
	services := make(map[string]*service)
	files := make([]*protoregistry.Files, 0, len(paths))
	for i, path := range paths {
		key := fmt.Sprintf("ai.grpc.descriptor_sets[%d]", i)
		set, fs, err := readDescriptorSet(path)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", key, path, err)
		}
		files = append(files, fs)
		for _, f := range set.GetFile() {
			for _, sd := range f.GetService() {
				name := sd.GetName()
				if pkg := f.GetPackage(); pkg != "" {
					name = pkg + "." + name
				}
				if prev, ok := services[name]; ok {
					if !proto.Equal(prev.desc, sd) {
						return nil, nil, fmt.Errorf("%s: %s: service %s differs from its definition in ai.grpc.descriptor_sets[%d]", key, path, name, prev.set)
					}
					continue
				}
				s := &service{set: i, desc: sd, methods: make(map[string]Method, len(sd.GetMethod()))}
				for _, md := range sd.GetMethod() {
					m, err := methodOf(name, md)
					if err != nil {
						return nil, nil, fmt.Errorf("%s: %s.%s: %w", key, name, md.GetName(), err)
					}
					s.methods[md.GetName()] = m
				}
				services[name] = s
			}
		}
	}
	return services, files, nil
}

// readDescriptorSet reads and checks one FileDescriptorSet file, and
// returns it with its files built.
func readDescriptorSet(path string) (*descriptorpb.FileDescriptorSet, *protoregistry.Files, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	set := new(descriptorpb.FileDescriptorSet)
	// The default resolver knows the (flexway.v1.operation) extension, which
	// this package links in, so method options parse into it.
	if err := proto.Unmarshal(b, set); err != nil {
		return nil, nil, fmt.Errorf("not a FileDescriptorSet: %w", err)
	}
	// Arbitrary bytes often parse as unknown fields: a set has only files.
	if len(set.ProtoReflect().GetUnknown()) > 0 {
		return nil, nil, errors.New("not a FileDescriptorSet: unexpected fields")
	}
	if len(set.GetFile()) == 0 {
		return nil, nil, errors.New("not a FileDescriptorSet: no file")
	}
	// Build the files to check them; imports left out of the set (protoc
	// without --include_imports) are tolerated.
	fs, err := (protodesc.FileOptions{AllowUnresolvable: true}).NewFiles(set)
	if err != nil {
		return nil, nil, fmt.Errorf("not a valid FileDescriptorSet: %w", err)
	}
	return set, fs, nil
}

// methodOf returns the method's shape and options; Backend and External are
// left to the caller.
func methodOf(svc string, md *descriptorpb.MethodDescriptorProto) (Method, error) {
	m := Method{
		FullMethod:    "/" + svc + "/" + md.GetName(),
		ClientStreams: md.GetClientStreaming(),
		ServerStreams: md.GetServerStreaming(),
	}
	opts := md.GetOptions()
	if opts == nil || !proto.HasExtension(opts, flexwayv1.E_Operation) {
		return m, nil
	}
	op, _ := proto.GetExtension(opts, flexwayv1.E_Operation).(*flexwayv1.Operation)
	m.Operation = op.GetName()
	ai := op.GetAi()
	if ai == nil {
		return m, nil
	}
	const key = "(flexway.v1.operation).ai"
	switch ai.GetMetering() {
	case flexwayv1.AI_PER_CALL:
		m.Metering = PerCall
	case flexwayv1.AI_PER_BYTE:
		m.Metering = PerByte
	case flexwayv1.AI_METERING_UNSPECIFIED:
		return Method{}, fmt.Errorf("%s: metering is not set (PER_CALL or PER_BYTE)", key)
	default:
		return Method{}, fmt.Errorf("%s: metering %d is not PER_CALL or PER_BYTE", key, ai.GetMetering())
	}
	price := ai.GetPricePerThousand()
	if price < 0 {
		return Method{}, fmt.Errorf("%s: price_per_thousand %v is negative", key, price)
	}
	nano, err := money.EURToNano(price)
	if err != nil {
		return Method{}, fmt.Errorf("%s: price_per_thousand %v: %w", key, price, err)
	}
	m.NanoEURPerThousand = nano
	m.Feature = ai.GetFeature()
	return m, nil
}
