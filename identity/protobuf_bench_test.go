package identity

import (
	"context"
	"testing"

	"github.com/kdedup/kdedup/identity/registrytest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// benchProtoDescriptor builds the descriptor of protoV1's Event (without the imported ref field)
// for the dynamicpb baseline, which needs compiled descriptors.
func benchProtoDescriptor(b *testing.B) protoreflect.MessageDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ, Label: opt}
		if msg != "" {
			f.TypeName = proto.String(msg)
		}
		return f
	}
	rep := field("tags", 4, str, "")
	rep.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("bench.proto"), Package: proto.String("ex"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Event"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("kind", 1, str, ""), field("seq", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), ""),
				field("meta", 3, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), ".ex.Event.Meta"), rep,
			},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name: proto.String("Meta"),
				Field: []*descriptorpb.FieldDescriptorProto{
					field("source", 1, str, ""), field("id", 2, str, ""),
					field("n", 3, descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum(), ""),
					field("level", 4, descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum(), ""),
					field("f", 5, descriptorpb.FieldDescriptorProto_TYPE_FIXED64.Enum(), ""),
				},
			}},
		}},
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		b.Fatal(err)
	}
	return file.Messages().ByName("Event")
}

// BenchmarkProtobufExtract measures protobuf:meta.id against unmarshalling the whole message
// with google.golang.org/protobuf's dynamicpb and reading the field, the library baseline:
//
//	go test -run '^$' -bench ProtobufExtract -benchtime 2000000x -cpu 1 -count 6 ./identity/
func BenchmarkProtobufExtract(b *testing.B) {
	r := registrytest.New()
	defer r.Close()
	r.Register("common.proto", "PROTOBUF", protoCommon)
	id := r.Register("events-value", "PROTOBUF", protoV1, registrytest.Reference{Name: "common.proto", Subject: "common.proto", Version: 1})
	body := protoEvent(protoMeta("ord-2026-03-01-000123456", 300, false), false)
	rec := wire(id, []byte{2, 2}, body)
	e := newExtractor(b, "protobuf:meta.id", newRegistry(b, r))
	ctx := context.Background()
	if got, _, err := e.Extract(ctx, nil, rec, nil); err != nil || string(got) != "ord-2026-03-01-000123456" {
		b.Fatalf("Extract = %q, %v", got, err)
	}
	md := benchProtoDescriptor(b)
	metaField, idField := md.Fields().ByName("meta"), md.Fields().ByName("meta").Message().Fields().ByName("id")
	b.Logf("record: %d bytes", len(rec))
	b.Run("skip", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		parallelCPU(b, func(pb *testing.PB) {
			for pb.Next() {
				if _, r, err := e.Extract(ctx, nil, rec, nil); r != Found || err != nil {
					b.Error("no identity")
					return
				}
			}
		})
	})
	b.Run("dynamicpb_decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		opts := proto.UnmarshalOptions{DiscardUnknown: true}
		parallelCPU(b, func(pb *testing.PB) {
			for pb.Next() {
				m := dynamicpb.NewMessage(md)
				if err := opts.Unmarshal(body, m); err != nil {
					b.Error(err)
					return
				}
				if m.Get(metaField).Message().Get(idField).String() == "" {
					b.Error("no identity")
					return
				}
			}
		})
	})
}
