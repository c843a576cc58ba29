#include "tensor_format.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace nabla::app {
namespace {

// NumPy's defaults: summarise above 1000 elements, keeping 3 at each edge.
constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string Element(const Tensor& t, int64_t i) {
  char buf[64];
  switch (t.GetDType()) {
    case DType::kFloat32:
      std::snprintf(buf, sizeof(buf), "%.6g", static_cast<double>(t.Data<float>()[i]));
      break;
    case DType::kFloat64:
      std::snprintf(buf, sizeof(buf), "%.6g", t.Data<double>()[i]);
      break;
    case DType::kInt32:
      std::snprintf(buf, sizeof(buf), "%d", t.Data<int32_t>()[i]);
      break;
    case DType::kInt64:
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(t.Data<int64_t>()[i]));
      break;
    case DType::kBool:
      return t.Data<bool>()[i] ? "True" : "False";
    case DType::kBFloat16:
      std::snprintf(buf, sizeof(buf), "%.4g", static_cast<double>(Bf16ToFloat(t.Data<bfloat16>()[i])));
      break;
  }
  return buf;
}

class Formatter {
 public:
  explicit Formatter(const Tensor& t) : t_(t), shape_(t.GetShape()) {
    summarise_ = t.Numel() > kSummariseAbove;
    strides_.assign(shape_.size(), 1);
    for (size_t d = shape_.size(); d-- > 1;) strides_[d - 1] = strides_[d] * shape_[d];
  }

  std::string Format() {
    if (shape_.empty()) return Element(t_, 0);
    // First pass finds the widest shown element so columns line up.
    Visit(0, 0, [&](int64_t i) { width_ = std::max(width_, Element(t_, i).size()); });
    std::string out;
    Emit(0, 0, &out);
    return out;
  }

 private:
  std::vector<int64_t> Shown(size_t dim) const {
    std::vector<int64_t> idx;
    const int64_t n = shape_[dim];
    if (summarise_ && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);  // the "..." marker
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  template <typename F>
  void Visit(size_t dim, int64_t base, const F& f) const {
    for (int64_t i : Shown(dim)) {
      if (i < 0) continue;
      if (dim + 1 == shape_.size()) {
        f(base + i);
      } else {
        Visit(dim + 1, base + i * strides_[dim], f);
      }
    }
  }

  void Emit(size_t dim, int64_t base, std::string* out) const {
    *out += '[';
    const std::vector<int64_t> shown = Shown(dim);
    const bool last_dim = dim + 1 == shape_.size();
    for (size_t k = 0; k < shown.size(); ++k) {
      if (k > 0) {
        if (last_dim) {
          *out += ' ';
        } else {
          // Blank lines between blocks of higher rank, as NumPy prints them.
          out->append(shape_.size() - dim - 1, '\n');
          out->append(dim + 1, ' ');
        }
      }
      const int64_t i = shown[k];
      if (i < 0) {
        *out += "...";
        continue;
      }
      if (last_dim) {
        std::string e = Element(t_, base + i);
        out->append(width_ - e.size(), ' ');
        *out += e;
      } else {
        Emit(dim + 1, base + i * strides_[dim], out);
      }
    }
    *out += ']';
  }

  const Tensor& t_;
  const Shape& shape_;
  std::vector<int64_t> strides_;
  bool summarise_ = false;
  size_t width_ = 0;
};

}  // namespace

std::string FormatTensor(const Tensor& tensor) { return Formatter(tensor).Format(); }

}  // namespace nabla::app
