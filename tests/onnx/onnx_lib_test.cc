// nabla::onnx's exporter table as a plugin uses it, and the reader's
// rejection of bytes that are no model, without the standard plugins.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "common/toy_ops.h"
#include "nabla/error.h"
#include "nabla/onnx.h"
#include "nabla/program_io.h"

namespace nabla {
namespace {

ProgramDesc ToyProgram() {
  toys::RegisterToyOps();
  return ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 4], dtype: float32}
    ops:
      - {type: toy_attrs, inputs: {X: [x]}, outputs: {Out: [y]}}
)",
                      "toy.yaml");
}

TEST(OnnxExport, AnOpWithoutExporterIsNamedThenAPluginRegistersOne) {
  const ProgramDesc program = ToyProgram();
  try {
    onnx_io::ExportOnnxBytes(program, {});
    FAIL() << "exported an op without exporter";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("toy_attrs"), std::string::npos) << e.what();
  }
  ASSERT_FALSE(onnx_io::HasOnnxExporter("toy_attrs"));
  onnx_io::RegisterOnnxExporter("toy_attrs", [](onnx_io::ExportContext& c) {
    EXPECT_EQ(c.ShapeOf("x"), (Shape{-1, 4}));
    c.AddNode("Relu", {c.Op().Input("X")[0]}, {c.Op().Output("Out")[0]});
  });
  const std::string bytes = onnx_io::ExportOnnxBytes(program, {});
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes));
  ASSERT_EQ(model.graph().node_size(), 1);
  EXPECT_EQ(model.graph().node(0).op_type(), "Relu");
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "x");
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "N");
  ASSERT_EQ(model.graph().output_size(), 1);
  EXPECT_EQ(model.graph().output(0).name(), "y");
}

TEST(OnnxImport, BytesThatAreNoModelAreOneLineErrors) {
  for (const std::string& bytes : {std::string("\x08\x07\x12\xff\xff", 5), std::string("not a model at all")}) {
    try {
      onnx_io::ImportOnnxBytes(bytes, "m.onnx");
      FAIL() << "read garbage";
    } catch (const Error& e) {
      EXPECT_TRUE(e.IsBadInput());
      EXPECT_NE(std::string(e.what()).find("m.onnx"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nabla
