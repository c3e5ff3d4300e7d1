// Command protovendor prints the .proto sources that Flexway imports but
// cannot fetch from the Buf Schema Registry (unreachable offline) from the
// descriptors that Go modules register, into third_party/: protovalidate's
// constraints and googleapis' HTTP annotations (for grpc-gateway).
//
// Run it from the repository root when protovalidate is bumped:
//
//	cd tools/protovendor && go run . -out ../../third_party
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoprint"
	_ "google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// files lists the vendored .proto files, by import path.
var files = []string{"buf/validate/validate.proto", "google/api/annotations.proto", "google/api/http.proto"}

func main() {
	out := flag.String("out", "third_party", "directory to write the .proto files into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "protovendor:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	printer := &protoprint.Printer{Compact: false, SortElements: false}
	for _, name := range files {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		d, err := desc.WrapFile(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := printer.PrintProtoFile(d, f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
