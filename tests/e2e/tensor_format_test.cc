// How `nabla exec` prints fetched tensors: NumPy's layout, summarised above
// 1000 elements.
#include "tensor_format.h"

#include <gtest/gtest.h>

#include <numeric>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"

namespace nabla::app {
namespace {

class TensorFormatTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }
  template <typename T>
  Tensor Iota(const Shape& shape, T start = 0) {
    Tensor t;
    T* p = t.Allocate<T>(HostDevice(), shape);
    std::iota(p, p + t.Numel(), start);
    return t;
  }
};

TEST_F(TensorFormatTest, ScalarsAndVectors) {
  Tensor s;
  s.Allocate<float>(HostDevice(), {})[0] = 0.1f;
  EXPECT_EQ(FormatTensor(s), "0.1");
  EXPECT_EQ(FormatTensor(Iota<int64_t>({4}, -2)), "[-2 -1  0  1]");
  Tensor b;
  bool* p = b.Allocate<bool>(HostDevice(), {2});
  p[0] = true, p[1] = false;
  EXPECT_EQ(FormatTensor(b), "[ True False]");
}

TEST_F(TensorFormatTest, MatricesAlignColumnsAndHigherRanksSeparateBlocks) {
  Tensor m;
  double* p = m.Allocate<double>(HostDevice(), {2, 2});
  p[0] = 1, p[1] = -2.5, p[2] = 100, p[3] = 0;
  EXPECT_EQ(FormatTensor(m), "[[   1 -2.5]\n [ 100    0]]");
  EXPECT_EQ(FormatTensor(Iota<int32_t>({2, 2, 2})), "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
  EXPECT_EQ(FormatTensor(Iota<float>({0, 3})), "[]");
}

TEST_F(TensorFormatTest, LargeTensorsAreSummarised) {
  EXPECT_EQ(FormatTensor(Iota<int32_t>({2000})), "[   0    1    2 ... 1997 1998 1999]");
  const std::string m = FormatTensor(Iota<int32_t>({100, 20}));
  EXPECT_EQ(m.substr(0, 36), "[[   0    1    2 ...   17   18   19]");
  EXPECT_NE(m.find("\n ...\n"), std::string::npos) << m;
  EXPECT_EQ(m.substr(m.size() - 37), " [1980 1981 1982 ... 1997 1998 1999]]");
  // Small tensors are never summarised, however long one axis is.
  EXPECT_EQ(FormatTensor(Iota<int32_t>({12})), "[ 0  1  2  3  4  5  6  7  8  9 10 11]");
}

}  // namespace
}  // namespace nabla::app
