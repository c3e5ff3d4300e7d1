package grpcproxy_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/flexway/flexway/server/grpcproxy"
)

func TestCodec(t *testing.T) {
	c := grpcproxy.Codec()
	if c.Name() != "proto" {
		t.Errorf("Name() = %q, want proto", c.Name())
	}
	msg := &testpb.SimpleRequest{ResponseSize: 7, Payload: &testpb.Payload{Body: []byte("abc")}}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}

	// A frame is its bytes, both ways, and survives the buffer's release.
	out, err := c.Marshal(&grpcproxy.Frame{Payload: wire})
	if err != nil || !bytes.Equal(out.Materialize(), wire) {
		t.Fatalf("Marshal(frame) = %x, %v; want %x", out.Materialize(), err, wire)
	}
	buf := mem.Copy(wire, mem.DefaultBufferPool())
	var f grpcproxy.Frame
	if err := c.Unmarshal(mem.BufferSlice{buf}, &f); err != nil {
		t.Fatal(err)
	}
	buf.Free()
	if !bytes.Equal(f.Payload, wire) {
		t.Errorf("Unmarshal(frame) = %x, want %x", f.Payload, wire)
	}
	if out, err := c.Marshal(&grpcproxy.Frame{}); err != nil || out.Len() != 0 {
		t.Errorf("Marshal(empty frame) = %d bytes, %v", out.Len(), err)
	}

	// Any other message is protobuf.
	out, err = c.Marshal(msg)
	if err != nil || !bytes.Equal(out.Materialize(), wire) {
		t.Fatalf("Marshal(proto) = %x, %v; want %x", out.Materialize(), err, wire)
	}
	got := &testpb.SimpleRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(msg, got, protocmp.Transform()); d != "" {
		t.Errorf("Unmarshal(proto) (-want +got):\n%s", d)
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal(string) succeeded")
	}
}
