// The op test table: every deterministic math op runs through nabla::RunOp
// on random inputs and is compared with a reference written here with naive
// loops, once per dtype the row lists.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "op_test_util.h"

namespace nabla::op_test {
namespace {

using Inputs = std::vector<std::vector<HostTensor>>;  // [input slot][var]
using Reference = std::function<std::vector<HostTensor>(const Inputs&, const AttributeMap&)>;

struct InputSpec {
  std::string slot;
  std::vector<Shape> shapes;  // one per var of the slot
  double low = -1.0, high = 1.0;
  DType fixed_dtype = DType::kFloat32;  // used when `fixed` (cast's input)
  bool fixed = false;
};

struct Row {
  Row(std::string name, std::string op, std::vector<InputSpec> inputs, AttributeMap attrs, Reference reference,
      std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64}, std::vector<std::string> dtype_attrs = {})
      : name(std::move(name)),
        op(std::move(op)),
        inputs(std::move(inputs)),
        attrs(std::move(attrs)),
        reference(std::move(reference)),
        dtypes(std::move(dtypes)),
        dtype_attrs(std::move(dtype_attrs)) {}

  std::string name;
  std::string op;
  std::vector<InputSpec> inputs;
  AttributeMap attrs;
  Reference reference;
  std::vector<DType> dtypes;
  // Attributes that must name the dtype under test (fill_constant's dtype).
  std::vector<std::string> dtype_attrs;
  std::vector<std::pair<std::string, int>> outputs = {{"Out", 1}};
};

template <typename T>
const T& A(const AttributeMap& a, const std::string& name) {
  return std::get<T>(a.at(name));
}

// ---------------------------------------------------------------- references

HostTensor Map(const HostTensor& x, const std::function<double(double)>& f) {
  HostTensor out{x.shape, {}};
  for (double v : x.v) out.v.push_back(f(v));
  return out;
}

Reference Unary(std::function<double(double)> f) {
  return [f](const Inputs& in, const AttributeMap&) { return std::vector<HostTensor>{Map(in[0][0], f)}; };
}

// Paddle's axis rule, spelled out: the lower-rank operand's dims sit at
// `axis` of the other's (trailing 1s dropped when they do not fit), then
// size-1 dims repeat.
HostTensor Broadcast2(const HostTensor& x, const HostTensor& y, int axis,
                      const std::function<double(double, double)>& f) {
  bool x_big = x.shape.size() >= y.shape.size();
  const Shape& big = x_big ? x.shape : y.shape;
  Shape small = x_big ? y.shape : x.shape;
  size_t rank = big.size();
  size_t at = axis == -1 ? rank - small.size() : static_cast<size_t>(axis);
  while (at + small.size() > rank && small.back() == 1) small.pop_back();
  Shape padded(rank, 1);
  for (size_t i = 0; i < small.size(); ++i) padded[at + i] = small[i];
  const Shape& xs = x_big ? big : padded;
  const Shape& ys = x_big ? padded : big;
  HostTensor out{Shape(rank), {}};
  for (size_t k = 0; k < rank; ++k) out.shape[k] = std::max(xs[k], ys[k]);
  for (int64_t flat = 0; flat < out.Numel(); ++flat) {
    std::vector<int64_t> idx = Unravel(flat, out.shape), ix(rank), iy(rank);
    for (size_t k = 0; k < rank; ++k) {
      ix[k] = idx[k] % xs[k];
      iy[k] = idx[k] % ys[k];
    }
    out.v.push_back(f(x.v[Ravel(ix, xs)], y.v[Ravel(iy, ys)]));
  }
  return out;
}

Reference Elementwise(std::function<double(double, double)> f) {
  return [f](const Inputs& in, const AttributeMap& a) {
    int axis = a.count("axis") ? A<int>(a, "axis") : -1;
    return std::vector<HostTensor>{Broadcast2(in[0][0], in[1][0], axis, f)};
  };
}

HostTensor MatmulRef(const HostTensor& x, const HostTensor& y, bool tx, bool ty, double alpha) {
  Shape xs = x.shape.size() == 1 ? Shape{1, x.shape[0]} : x.shape;
  Shape ys = y.shape.size() == 1 ? Shape{y.shape[0], 1} : y.shape;
  int64_t m = tx ? xs.back() : xs[xs.size() - 2];
  int64_t k = tx ? xs[xs.size() - 2] : xs.back();
  int64_t n = ty ? ys[ys.size() - 2] : ys.back();
  Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  size_t br = std::max(xb.size(), yb.size());
  xb.insert(xb.begin(), br - xb.size(), 1);
  yb.insert(yb.begin(), br - yb.size(), 1);
  Shape ob(br);
  for (size_t i = 0; i < br; ++i) ob[i] = std::max(xb[i], yb[i]);
  HostTensor out{ob, {}};
  if (x.shape.size() != 1) out.shape.push_back(m);
  if (y.shape.size() != 1) out.shape.push_back(n);
  if (out.shape.empty()) out.shape.push_back(1);
  for (int64_t b = 0; b < NumElements(ob); ++b) {
    std::vector<int64_t> idx = Unravel(b, ob), ixb(br), iyb(br);
    for (size_t d = 0; d < br; ++d) {
      ixb[d] = idx[d] % xb[d];
      iyb[d] = idx[d] % yb[d];
    }
    int64_t xo = Ravel(ixb, xb) * m * k, yo = Ravel(iyb, yb) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          double xv = tx ? x.v[xo + p * m + i] : x.v[xo + i * k + p];
          double yv = ty ? y.v[yo + j * k + p] : y.v[yo + p * n + j];
          s += xv * yv;
        }
        out.v.push_back(alpha * s);
      }
    }
  }
  return out;
}

std::vector<HostTensor> Matmul(const Inputs& in, const AttributeMap& a) {
  bool tx = a.count("transpose_X") && A<bool>(a, "transpose_X");
  bool ty = a.count("transpose_Y") && A<bool>(a, "transpose_Y");
  double alpha = a.count("alpha") ? A<float>(a, "alpha") : 1.0;
  return {MatmulRef(in[0][0], in[1][0], tx, ty, alpha)};
}

std::vector<HostTensor> Mul(const Inputs& in, const AttributeMap& a) {
  const HostTensor& x = in[0][0];
  const HostTensor& y = in[1][0];
  int xn = a.count("x_num_col_dims") ? A<int>(a, "x_num_col_dims") : 1;
  int yn = a.count("y_num_col_dims") ? A<int>(a, "y_num_col_dims") : 1;
  int64_t m = 1, k = 1, n = 1;
  for (int i = 0; i < xn; ++i) m *= x.shape[i];
  for (size_t i = xn; i < x.shape.size(); ++i) k *= x.shape[i];
  for (size_t i = yn; i < y.shape.size(); ++i) n *= y.shape[i];
  HostTensor out{Shape(x.shape.begin(), x.shape.begin() + xn), {}};
  out.shape.insert(out.shape.end(), y.shape.begin() + yn, y.shape.end());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += x.v[i * k + p] * y.v[p * n + j];
      out.v.push_back(s);
    }
  return {out};
}

Reference Reduce(bool mean) {
  return [mean](const Inputs& in, const AttributeMap& a) {
    const HostTensor& x = in[0][0];
    size_t rank = x.shape.size();
    std::vector<int> dims = a.count("dim") ? A<std::vector<int>>(a, "dim") : std::vector<int>{0};
    bool all = a.count("reduce_all") && A<bool>(a, "reduce_all");
    bool keep = a.count("keep_dim") && A<bool>(a, "keep_dim");
    std::vector<bool> reduced(rank, all);
    for (int d : dims) reduced[d < 0 ? d + static_cast<int>(rank) : d] = true;
    Shape kept = x.shape;
    for (size_t i = 0; i < rank; ++i)
      if (reduced[i]) kept[i] = 1;
    HostTensor out{kept, std::vector<double>(static_cast<size_t>(NumElements(kept)), 0.0)};
    for (int64_t flat = 0; flat < x.Numel(); ++flat) {
      std::vector<int64_t> idx = Unravel(flat, x.shape);
      for (size_t i = 0; i < rank; ++i)
        if (reduced[i]) idx[i] = 0;
      out.v[Ravel(idx, kept)] += x.v[flat];
    }
    if (mean)
      for (double& v : out.v) v /= static_cast<double>(x.Numel() / out.Numel());
    if (!keep) {
      out.shape.clear();
      for (size_t i = 0; i < rank; ++i)
        if (!reduced[i]) out.shape.push_back(x.shape[i]);
      if (out.shape.empty()) out.shape.push_back(1);
    }
    return std::vector<HostTensor>{out};
  };
}

std::vector<HostTensor> Transpose(const Inputs& in, const AttributeMap& a) {
  const HostTensor& x = in[0][0];
  const auto& axis = A<std::vector<int>>(a, "axis");
  HostTensor out{Shape(axis.size()), {}};
  for (size_t k = 0; k < axis.size(); ++k) out.shape[k] = x.shape[axis[k]];
  for (int64_t flat = 0; flat < x.Numel(); ++flat) {
    std::vector<int64_t> oi = Unravel(flat, out.shape), xi(axis.size());
    for (size_t k = 0; k < axis.size(); ++k) xi[axis[k]] = oi[k];
    out.v.push_back(x.v[Ravel(xi, x.shape)]);
  }
  return {out};
}

// ---------------------------------------------------------------- the table

std::vector<Row> Rows() {
  const std::vector<DType> with_ints = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
  const std::vector<DType> ints = {DType::kInt32, DType::kInt64};
  auto add = [](double a, double b) { return a + b; };
  auto sub = [](double a, double b) { return a - b; };
  auto mul = [](double a, double b) { return a * b; };
  auto div = [](double a, double b) { return a / b; };
  std::vector<Row> rows = {
      {"add_same", "elementwise_add", {{"X", {{2, 3}}}, {"Y", {{2, 3}}}}, {}, Elementwise(add)},
      {"add_ints", "elementwise_add", {{"X", {{2, 3}}, -50, 50}, {"Y", {{2, 3}}, -50, 50}}, {}, Elementwise(add), ints},
      {"add_axis1", "elementwise_add", {{"X", {{2, 3, 4}}}, {"Y", {{3}}}}, {{"axis", 1}}, Elementwise(add)},
      {"add_trailing", "elementwise_add", {{"X", {{2, 3, 4}}}, {"Y", {{3, 4}}}}, {}, Elementwise(add)},
      {"add_x_smaller", "elementwise_add", {{"X", {{4}}}, {"Y", {{3, 4}}}}, {}, Elementwise(add)},
      {"add_y_trailing_ones",
       "elementwise_add",
       {{"X", {{2, 3, 4}}}, {"Y", {{3, 1}}}},
       {{"axis", 1}},
       Elementwise(add)},
      {"sub_axis0", "elementwise_sub", {{"X", {{3, 2, 2}}}, {"Y", {{3, 1}}}}, {{"axis", 0}}, Elementwise(sub)},
      {"sub_ints", "elementwise_sub", {{"X", {{4}}, -50, 50}, {"Y", {{4}}, -50, 50}}, {}, Elementwise(sub), ints},
      {"mul_scalar", "elementwise_mul", {{"X", {{2, 3}}}, {"Y", {{1}}}}, {}, Elementwise(mul)},
      {"mul_ints", "elementwise_mul", {{"X", {{2, 2}}, -9, 9}, {"Y", {{2}}, -9, 9}}, {}, Elementwise(mul), ints},
      {"div_axis1", "elementwise_div", {{"X", {{2, 3, 2}}}, {"Y", {{3}}, 0.5, 2.0}}, {{"axis", 1}}, Elementwise(div)},
      {"mul_matrix", "mul", {{"X", {{3, 4}}}, {"Y", {{4, 5}}}}, {}, Mul},
      {"mul_flatten_x", "mul", {{"X", {{2, 3, 4}}}, {"Y", {{4, 5}}}}, {{"x_num_col_dims", 2}}, Mul},
      {"mul_flatten_y", "mul", {{"X", {{3, 4}}}, {"Y", {{2, 2, 3}}}}, {{"y_num_col_dims", 2}}, Mul},
      {"matmul_plain", "matmul", {{"X", {{3, 4}}}, {"Y", {{4, 5}}}}, {}, Matmul},
      {"matmul_tx", "matmul", {{"X", {{4, 3}}}, {"Y", {{4, 5}}}}, {{"transpose_X", true}}, Matmul},
      {"matmul_ty_alpha",
       "matmul",
       {{"X", {{3, 4}}}, {"Y", {{5, 4}}}},
       {{"transpose_Y", true}, {"alpha", 0.5f}},
       Matmul},
      {"matmul_both",
       "matmul",
       {{"X", {{4, 3}}}, {"Y", {{5, 4}}}},
       {{"transpose_X", true}, {"transpose_Y", true}},
       Matmul},
      {"matmul_batched", "matmul", {{"X", {{2, 3, 4}}}, {"Y", {{2, 4, 2}}}}, {}, Matmul},
      {"matmul_batch_broadcast", "matmul", {{"X", {{3, 4}}}, {"Y", {{2, 1, 4, 2}}}}, {}, Matmul},
      {"matmul_vectors", "matmul", {{"X", {{4}}}, {"Y", {{4}}}}, {}, Matmul},
      {"matmul_vector_matrix", "matmul", {{"X", {{4}}}, {"Y", {{4, 3}}}}, {}, Matmul},
      {"scale_after",
       "scale",
       {{"X", {{2, 3}}, -20, 20}},
       {{"scale", 2.0f}, {"bias", 1.0f}},
       [](const Inputs& in, const AttributeMap&) {
         return std::vector<HostTensor>{Map(in[0][0], [](double x) { return 2.0 * x + 1.0; })};
       },
       with_ints},
      {"scale_before",
       "scale",
       {{"X", {{5}}}},
       {{"scale", -1.5f}, {"bias", 0.25f}, {"bias_after_scale", false}},
       Unary([](double x) { return -1.5 * (x + 0.25); })},
      {"sum_three",
       "sum",
       {{"X", {{2, 3}, {2, 3}, {2, 3}}, -20, 20}},
       {},
       [](const Inputs& in, const AttributeMap&) {
         HostTensor out = in[0][0];
         for (size_t i = 0; i < out.v.size(); ++i) out.v[i] += in[0][1].v[i] + in[0][2].v[i];
         return std::vector<HostTensor>{out};
       },
       with_ints},
      {"mean",
       "mean",
       {{"X", {{3, 4}}}},
       {},
       [](const Inputs& in, const AttributeMap&) {
         double s = 0;
         for (double v : in[0][0].v) s += v;
         return std::vector<HostTensor>{{{1}, {s / 12.0}}};
       }},
      {"reduce_sum_default", "reduce_sum", {{"X", {{3, 4}}, -20, 20}}, {}, Reduce(false), with_ints},
      {"reduce_sum_keep",
       "reduce_sum",
       {{"X", {{2, 3, 4}}}},
       {{"dim", std::vector<int>{-1, 0}}, {"keep_dim", true}},
       Reduce(false)},
      {"reduce_sum_all", "reduce_sum", {{"X", {{2, 3}}}}, {{"reduce_all", true}}, Reduce(false)},
      {"reduce_mean_middle", "reduce_mean", {{"X", {{2, 3, 4}}}}, {{"dim", std::vector<int>{1}}}, Reduce(true)},
      {"reduce_mean_all_keep",
       "reduce_mean",
       {{"X", {{2, 3}}}},
       {{"reduce_all", true}, {"keep_dim", true}},
       Reduce(true)},
      {"minus", "minus", {{"X", {{2, 3}}}, {"Y", {{2, 3}}}}, {}, Elementwise(sub)},
      {"exp", "exp", {{"X", {{2, 3}}, -2, 2}}, {}, Unary([](double x) { return std::exp(x); })},
      {"log", "log", {{"X", {{2, 3}}, 0.1, 4}}, {}, Unary([](double x) { return std::log(x); })},
      {"sqrt", "sqrt", {{"X", {{2, 3}}, 0, 4}}, {}, Unary([](double x) { return std::sqrt(x); })},
      {"square", "square", {{"X", {{2, 3}}, -3, 3}}, {}, Unary([](double x) { return x * x; })},
      {"abs", "abs", {{"X", {{2, 3}}}}, {}, Unary([](double x) { return std::abs(x); })},
      {"fused_add_tanh_bias",
       "fused_elemwise_activation",
       {{"X", {{3, 4}}, -2, 2}, {"Y", {{4}}, -2, 2}},
       {{"axis", 1}, {"functor_list", std::vector<std::string>{"tanh", "elementwise_add"}}},
       Elementwise([](double a, double b) { return std::tanh(a + b); })},
      {"fused_add_relu_bias",
       "fused_elemwise_activation",
       {{"X", {{2, 5}}, -2, 2}, {"Y", {{5}}, -2, 2}},
       {{"axis", 1}, {"functor_list", std::vector<std::string>{"relu", "elementwise_add"}}},
       Elementwise([](double a, double b) { return std::max(a + b, 0.0); })},
      {"fused_add_sigmoid_same_shape",
       "fused_elemwise_activation",
       {{"X", {{2, 3}}, -4, 4}, {"Y", {{2, 3}}, -4, 4}},
       {{"axis", -1}, {"functor_list", std::vector<std::string>{"sigmoid", "elementwise_add"}}},
       Elementwise([](double a, double b) { return 1.0 / (1.0 + std::exp(-(a + b))); })},
      {"transpose_rank3",
       "transpose",
       {{"X", {{2, 3, 4}}, -50, 50}},
       {{"axis", std::vector<int>{1, 2, 0}}},
       Transpose,
       with_ints},
      {"reshape_infer",
       "reshape",
       {{"X", {{2, 3, 4}}, -50, 50}},
       {{"shape", std::vector<int>{0, -1}}},
       [](const Inputs& in, const AttributeMap&) {
         return std::vector<HostTensor>{{{2, 12}, in[0][0].v}};
       },
       with_ints},
      {"assign", "assign", {{"X", {{2, 3}}, -50, 50}}, {}, Unary([](double x) { return x; }), with_ints},
      {"fill_zeros_like",
       "fill_zeros_like",
       {{"X", {{2, 3}}, -50, 50}},
       {},
       Unary([](double) { return 0.0; }),
       with_ints},
      {"fill_constant",
       "fill_constant",
       {},
       {{"shape", std::vector<int>{2, 3}}, {"value", 3.0f}},
       [](const Inputs&, const AttributeMap&) {
         return std::vector<HostTensor>{{{2, 3}, std::vector<double>(6, 3.0)}};
       },
       with_ints,
       {"dtype"}},
  };
  // cast: the row's dtype is the output; inputs come in a fixed dtype.
  auto cast_row = [](std::string name, DType from, double low, double high, std::function<double(double)> f,
                     std::vector<DType> to) {
    Row r{std::move(name),
          "cast",
          {{"X", {{2, 3}}, low, high, from, true}},
          {{"in_dtype", std::string(DTypeName(from))}},
          Unary(std::move(f)),
          std::move(to),
          {"out_dtype"}};
    return r;
  };
  rows.push_back(cast_row("cast_from_float64", DType::kFloat64, -9, 9, [](double x) { return std::trunc(x); },
                          {DType::kInt32, DType::kInt64}));
  rows.push_back(cast_row("cast_from_int64", DType::kInt64, -50, 50, [](double x) { return x; },
                          {DType::kFloat32, DType::kFloat64, DType::kInt32}));
  rows.push_back(cast_row("cast_float32_up", DType::kFloat32, -1, 1, [](double x) { return x; },
                          {DType::kFloat64, DType::kFloat32}));
  rows.push_back(
      cast_row("cast_to_bool", DType::kInt32, -2, 2, [](double x) { return x != 0 ? 1.0 : 0.0; }, {DType::kBool}));
  return rows;
}

struct Case {
  Row row;
  DType dtype;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const Row& r : Rows())
    for (DType d : r.dtypes) cases.push_back({r, d});
  return cases;
}

class OpTable : public ::testing::TestWithParam<Case> {};

TEST_P(OpTable, ForwardMatchesReference) {
  const Row& row = GetParam().row;
  DType dtype = GetParam().dtype;
  std::mt19937_64 rng(std::hash<std::string>{}(row.name));
  OpRun run;
  run.type = row.op;
  run.attrs = row.attrs;
  for (const std::string& a : row.dtype_attrs) run.attrs[a] = std::string(DTypeName(dtype));
  Inputs inputs;
  for (const InputSpec& in : row.inputs) {
    DType in_dtype = in.fixed ? in.fixed_dtype : dtype;
    std::vector<HostTensor> vars;
    for (const Shape& s : in.shapes) vars.push_back(RandomTensor(s, in_dtype, in.low, in.high, rng));
    inputs.push_back(vars);
    run.inputs.emplace_back(in.slot, vars);
    run.input_dtypes.push_back(in_dtype);
  }
  run.outputs = row.outputs;
  std::vector<DType> out_dtypes;
  std::vector<HostTensor> got = run.Run(&out_dtypes);
  std::vector<HostTensor> want = row.reference(inputs, run.attrs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(out_dtypes[i], dtype) << "output " << i << " of " << row.op;
    // References compute in double from the same (rounded) inputs; integer
    // and bool results must match exactly.
    double tol = dtype == DType::kFloat32 ? 2e-6 : (dtype == DType::kFloat64 ? 1e-12 : 0.0);
    ExpectNear(got[i], want[i], tol, tol, row.op + " output " + std::to_string(i));
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.row.name + "_" + DTypeName(info.param.dtype);
}

INSTANTIATE_TEST_SUITE_P(MathOps, OpTable, ::testing::ValuesIn(Cases()), CaseName);

// ---------------------------------------------------------------- PyTorch table

// Cases whose inputs and outputs come from PyTorch (scripts/shape_op_reference.py
// writes torch_forward_cases.inc): the SPEC §6 shape, elementwise and
// activation ops. A tensor's dtype "" is the dtype under test.
struct TorchTensor {
  std::string slot;
  std::string dtype;
  Shape shape;
  std::vector<double> values;
};

struct TorchCase {
  std::string name;
  std::string op;
  std::vector<TorchTensor> inputs;  // a duplicable slot repeats its name
  AttributeMap attrs;
  std::vector<TorchTensor> outputs;
  std::vector<std::string> dtypes;
};

const std::vector<TorchCase>& TorchCases() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  (void)kInf;
  static const std::vector<TorchCase> cases = {
#include "torch_forward_cases.inc"
  };
  return cases;
}

DType DTypeOf(const std::string& name, DType case_dtype) {
  if (name.empty()) return case_dtype;
  DType d;
  EXPECT_TRUE(ParseDType(name, &d)) << name;
  return d;
}

struct TorchRun {
  const TorchCase* c;
  DType dtype;
};

void PrintTo(const TorchRun& r, std::ostream* os) { *os << r.c->name << "/" << DTypeName(r.dtype); }

class TorchTable : public ::testing::TestWithParam<TorchRun> {};

TEST_P(TorchTable, ForwardMatchesPyTorch) {
  const TorchCase& c = *GetParam().c;
  const DType dtype = GetParam().dtype;
  OpRun run;
  run.type = c.op;
  run.attrs = c.attrs;
  for (const TorchTensor& t : c.inputs) {
    HostTensor h{t.shape, {}};
    for (double v : t.values) h.v.push_back(RoundTo(DTypeOf(t.dtype, dtype), v));
    if (run.inputs.empty() || run.inputs.back().first != t.slot) {
      run.inputs.push_back({t.slot, {}});
      run.input_dtypes.push_back(DTypeOf(t.dtype, dtype));
    }
    run.inputs.back().second.push_back(h);
  }
  run.outputs.clear();
  for (const TorchTensor& t : c.outputs) run.outputs.push_back({t.slot, 1});
  std::vector<DType> out_dtypes;
  std::vector<HostTensor> got = run.Run(&out_dtypes);
  ASSERT_EQ(got.size(), c.outputs.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const TorchTensor& want = c.outputs[i];
    const DType want_dtype = DTypeOf(want.dtype, dtype);
    EXPECT_EQ(out_dtypes[i], want_dtype) << c.op << " output " << want.slot;
    // PyTorch computed in float64 from the same (float32-representable)
    // inputs; integer results must match exactly.
    const double tol = want_dtype == DType::kFloat32 ? 3e-6 : (want_dtype == DType::kFloat64 ? 1e-12 : 0.0);
    ExpectNear(got[i], HostTensor{want.shape, want.values}, tol, tol, c.name + " " + want.slot);
  }
}

std::vector<TorchRun> TorchRuns() {
  std::vector<TorchRun> runs;
  for (const TorchCase& c : TorchCases())
    for (const std::string& d : c.dtypes) runs.push_back({&c, DTypeOf(d, DType::kFloat32)});
  return runs;
}

INSTANTIATE_TEST_SUITE_P(ShapeOps, TorchTable, ::testing::ValuesIn(TorchRuns()),
                         [](const ::testing::TestParamInfo<TorchRun>& info) {
                           return info.param.c->name + "_" + DTypeName(info.param.dtype);
                         });

// Every op of the math_ops plugin that computes something deterministic has
// a row: a new op without one fails here.
TEST(OpTableCoverage, EveryDeterministicMathOpHasARow) {
  std::set<std::string> covered;
  for (const Row& r : Rows()) covered.insert(r.op);
  for (const TorchCase& c : TorchCases()) covered.insert(c.op);
  for (const auto& plugin : CurrentRegistry()->Plugins()) {
    if (plugin.name != "math_ops") continue;
    for (const std::string& op : plugin.ops) {
      const OpInfo& info = CurrentRegistry()->Get(op);
      bool is_grad_op = op.size() > 5 && op.compare(op.size() - 5, 5, "_grad") == 0;
      if (info.traits.random || is_grad_op) continue;
      EXPECT_TRUE(covered.count(op)) << "math op '" << op << "' has no row in the op test table";
    }
  }
}

}  // namespace
}  // namespace nabla::op_test
