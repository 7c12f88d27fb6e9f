// Command rpcdesc writes the descriptors of google.rpc's Status and error
// details (RetryInfo, QuotaFailure, ErrorInfo, BadRequest...) as a
// FileDescriptorSet, for protoc to generate the Python and TypeScript
// clients' types from. They come from the Go module the daemon encodes them
// with, so the clients decode exactly what it sends, with no copy of the
// .proto files to keep in step.
//
// The files are re-homed as package sandboxd.rpc (sandboxd/rpc/*.proto):
// a Python program may also load googleapis' own google.rpc modules, and
// protobuf's shared descriptor pool refuses a second, different file
// defining the same names. The wire format does not carry package names,
// so the messages decode the same; clients match details by the type URL's
// google.rpc name.
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	fromPackage = "google.rpc"
	toPackage   = "sandboxd.rpc"
)

func main() {
	out := flag.String("o", "", "file to write the FileDescriptorSet to")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "rpcdesc: -o FILE is required")
		os.Exit(2)
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, f := range []protoreflect.FileDescriptor{
		anypb.File_google_protobuf_any_proto,
		durationpb.File_google_protobuf_duration_proto,
		status.File_google_rpc_status_proto,
		errdetails.File_google_rpc_error_details_proto,
	} {
		set.File = append(set.File, rehome(protodesc.ToFileDescriptorProto(f)))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpcdesc:", err)
		os.Exit(1)
	}
}

// rehome moves a google.rpc file to sandboxd.rpc, and drops the options
// that name other languages' packages; other files pass unchanged.
func rehome(f *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	if f.GetPackage() != fromPackage {
		return f
	}
	f.Name = proto.String(path.Join("sandboxd/rpc", path.Base(f.GetName())))
	f.Package = proto.String(toPackage)
	f.Options = nil
	for _, m := range f.MessageType {
		renameFields(m)
	}
	return f
}

// renameFields points fields of message types at the new package.
func renameFields(m *descriptorpb.DescriptorProto) {
	for _, fd := range m.Field {
		if name, ok := strings.CutPrefix(fd.GetTypeName(), "."+fromPackage+"."); ok {
			fd.TypeName = proto.String("." + toPackage + "." + name)
		}
	}
	for _, nested := range m.NestedType {
		renameFields(nested)
	}
}
