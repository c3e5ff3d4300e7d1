package grpcproxy

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// RegisterReflection registers gRPC server reflection (v1 and v1alpha, as
// [reflection.Register] does) on s. With a nil p it is
// reflection.Register. Otherwise the services listed are s's own and every
// service p routes, and descriptors are looked up in the binary's
// registry (protoregistry.GlobalFiles) first, then in p's descriptor sets
// in their configured order, so that `grpcurl list`, `describe` and calls
// by reflection work for a proxied service whose types the gateway does
// not link. A file a set imports but does not include is found only if
// the binary links it (flexway/v1/operation.proto, the well-known types).
// Call it after every service of s is registered.
func RegisterReflection(s reflection.GRPCServer, p *Proxy) {
	if p == nil {
		reflection.Register(s)
		return
	}
	opts := reflection.ServerOptions{
		Services:           proxiedServices{s, p},
		DescriptorResolver: setResolver{p.files},
	}
	v1alphareflectiongrpc.RegisterServerReflectionServer(s, reflection.NewServer(opts))
	v1reflectiongrpc.RegisterServerReflectionServer(s, reflection.NewServerV1(opts))
}

// proxiedServices lists a server's own services and the proxy's routed
// ones; reflection reads only the names.
type proxiedServices struct {
	own reflection.ServiceInfoProvider
	p   *Proxy
}

// GetServiceInfo implements [reflection.ServiceInfoProvider].
func (ps proxiedServices) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := ps.own.GetServiceInfo()
	for svc := range ps.p.services {
		if _, ok := out[svc]; !ok {
			out[svc] = grpc.ServiceInfo{}
		}
	}
	return out
}

// setResolver finds files and descriptors in protoregistry.GlobalFiles,
// then in each descriptor set's files.
type setResolver struct{ sets []*protoregistry.Files }

var _ protodesc.Resolver = setResolver{}

// FindFileByPath implements [protodesc.Resolver].
func (r setResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	return find(r, func(f *protoregistry.Files) (protoreflect.FileDescriptor, error) { return f.FindFileByPath(path) })
}

// FindDescriptorByName implements [protodesc.Resolver].
func (r setResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	return find(r, func(f *protoregistry.Files) (protoreflect.Descriptor, error) { return f.FindDescriptorByName(name) })
}

// find returns what in finds in the global registry, else in the first of
// r's sets where it finds it, else the last set's error.
func find[T any](r setResolver, in func(*protoregistry.Files) (T, error)) (T, error) {
	v, err := in(protoregistry.GlobalFiles)
	for _, s := range r.sets {
		if err == nil {
			break
		}
		v, err = in(s)
	}
	return v, err
}
