#pragma once
// Datasets for training: columns read from IDX (plain or gzip), CSV or .npy
// files, batched into tensors that feed program vars by name.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {
class Device;
}

namespace nabla::train {

// Element types found in dataset files (IDX has some nabla's DType lacks).
enum class ElemKind { kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat32, kFloat64, kBool };
const char* ElemKindName(ElemKind kind);

// One column: `rows` samples of `sample_shape` each, stored row-major in
// host byte order.
struct Column {
  std::string name;
  std::string source;  // the file it came from, for messages
  ElemKind kind = ElemKind::kFloat64;
  Shape sample_shape;
  int64_t rows = 0;
  std::vector<uint8_t> bytes;

  int64_t SampleNumel() const;
  double ValueAsDouble(int64_t flat_index) const;
};

struct Dataset {
  std::map<std::string, Column> columns;
  // Rows of every column (they must agree; checked by the readers).
  int64_t Size() const;
  const Column& Get(const std::string& name) const;
};

// IDX as in MNIST: big-endian magic (0, 0, type, ndims), dims, data. gzip
// files are read through zlib; plain files pass through unchanged.
Column ReadIdxFile(const std::string& path, const std::string& column_name);
// One column per (name, file); all must have the same number of rows.
Dataset ReadIdxDataset(const std::map<std::string, std::string>& files);
Dataset ReadNpyDataset(const std::map<std::string, std::string>& files);

// Text as a byte vocabulary (token = byte, 256 of them), for language models.
// `patterns` are paths or globs (glob(3)), expanded in order, each glob's
// matches sorted, files seen before (a symlink to one, say) skipped, and
// paths matching an `exclude` glob (fnmatch(3) on the whole path) dropped;
// a pattern that matches nothing is an error naming it, unless it is itself
// the name of a file ("a[1].txt"); every path must be a regular file (a
// folder, pipe or device is an error, before anything opens it).
std::vector<std::string> ExpandTextFiles(const std::vector<std::string>& patterns,
                                         const std::vector<std::string>& exclude);
// Cuts each file into windows of seq_len + 1 bytes at stride seq_len (a
// window's last token is the next one's first): column "inputs" holds the
// first seq_len bytes, "labels" the last seq_len. The last `eval_fraction`
// of each file's windows (rounded to nearest; at least one when the fraction
// is positive and the file has two or more) go to `eval` instead of `train`,
// so held-out text is never trained on and every file is represented in
// both. Files are not joined: no window spans two files.
struct TextSplits {
  Dataset train;
  Dataset eval;
};
// seq_len lies in [1, kMaxTextSeqLen]; `split` names the windows in the
// error for text without any ("training", or "evaluation" for an eval
// split read on its own).
inline constexpr int64_t kMaxTextSeqLen = int64_t(1) << 30;
TextSplits ReadTextDataset(const std::vector<std::string>& files, int64_t seq_len, double eval_fraction,
                           const std::string& split = "training");

// CSV columns chosen by spec: a header name, a 0-based index, or a 0-based
// half-open range "a:b" / "a:" (many numeric columns into one feature
// column). Each spec becomes a column named by the spec. Values are numbers;
// an empty or non-numeric cell is an error naming line and column.
Dataset ReadCsvDataset(const std::string& path, const std::vector<std::string>& specs, bool header, char delimiter);

// How one column feeds one program var.
struct FeedBinding {
  std::string var;
  const Column* column = nullptr;  // non-owning: points into a Dataset
  DType dtype = DType::kFloat32;   // the var's dtype
  Shape sample_shape;              // the var's shape without the batch dim
  double scale = 1.0;              // applied to values going into float vars
};

// Checks that the column fits the var (per-sample element count) and picks
// the default scale; `where` prefixes messages (config position).
FeedBinding BindFeed(const std::string& var, const Shape& var_shape, DType var_dtype, const Column& column,
                     std::optional<double> scale, const std::string& where);

// Checks every value of an integer feed lies in [0, classes); the error names
// the file, the row and the value.
void CheckLabelRange(const FeedBinding& feed, int64_t classes, const std::string& where);

// The sample order of one epoch: 0..n-1, or a permutation that depends only
// on (seed, epoch), so a resumed run sees the same batches.
std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);
int64_t NumBatches(int64_t n, int64_t batch_size, bool drop_last);

// The tensor for rows order[begin, end) of one feed, on `device`.
Tensor MakeBatch(const FeedBinding& feed, const std::vector<int64_t>& order, int64_t begin, int64_t end,
                 Device& device);

}  // namespace nabla::train
