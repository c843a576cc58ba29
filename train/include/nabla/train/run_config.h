#pragma once
// The run config: what `nabla run` trains and how. Every key, its
// type and its default are documented in docs/run-config.md; an unknown key
// or an ill-typed value is an Error naming file:line:col.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nabla/program.h"
#include "nabla/train.h"

namespace nabla {
class Device;
}

namespace nabla::train {

// A position in the config file, for messages that come after parsing
// (a feed var the program lacks, a missing data file).
struct ConfigPos {
  std::string file;
  int line = 0;  // 1-based; 0 = unknown
  int col = 0;
  std::string Where() const;  // "run.yaml:12:5" (or just the file)
};

// The optimizer and learning-rate schedule of nabla/train.h, with where the
// config set them.
struct LrSchedule : LrScheduleOptions {
  ConfigPos pos;
};

struct OptimizerConfig : OptimizerOptions {
  LrSchedule schedule;
  ConfigPos pos;
};

// One program var fed from one dataset column.
struct FeedConfig {
  std::string var;
  // idx / npy: the key of a file in `files`; csv: a header name, a 0-based
  // index, or a 0-based half-open range "a:b" ("a:" runs to the last column).
  std::string column;
  // Multiplies values going into a float var; default 1/255 for uint8 data
  // (IDX images), 1 otherwise.
  std::optional<double> scale;
  ConfigPos pos;
};

struct SplitConfig {
  bool present = false;
  std::map<std::string, std::string> files;  // idx / npy: column name -> path (resolved)
  std::map<std::string, ConfigPos> file_pos;
  std::string path;  // csv: the file (resolved)
  // text: paths or globs (resolved), and globs of paths to leave out
  std::vector<std::string> text_files;
  std::vector<std::string> text_exclude;
  std::vector<FeedConfig> feeds;
  ConfigPos pos;
};

struct DataConfig {
  std::string format = "idx";  // idx | csv | npy | text
  SplitConfig train;
  SplitConfig eval;
  int64_t batch_size = 64;
  int64_t eval_batch_size = 0;  // 0: batch_size
  bool shuffle = true;
  std::optional<uint64_t> seed;  // default: the top-level seed
  bool drop_last = false;
  bool csv_header = true;
  char csv_delimiter = ',';
  int64_t seq_len = 0;            // text: tokens per window (a window holds seq_len + 1)
  double eval_fraction = 0;       // text: the share of each file's windows held out for eval
  int64_t samples_per_epoch = 0;  // 0: the whole training set; else the first N of each epoch's order
  ConfigPos pos;
};

struct AccuracyConfig {
  bool enabled = false;
  std::string logits;  // "" : the Logits/X input of the op that reads the label
  std::string label;   // "" : the integer feed var
  int k = 1;
  ConfigPos pos;
};

struct CheckpointConfig {
  std::string dir;          // "": no checkpoints
  int64_t every_steps = 0;  // 0: only per epoch (when every_epoch)
  bool every_epoch = true;
  int keep_last = 3;  // 0: keep all
  bool resume = false;
  ConfigPos pos;
};

struct LoggingConfig {
  int64_t every_steps = 100;
  std::string metrics_file;       // "": none; .csv or .jsonl
  std::string plot;               // "": none; .png, .svg or .txt (gnuplot)
  std::string progress = "auto";  // auto | bar | lines | none
  ConfigPos pos;
};

// Data parallelism over MPI (docs/distributed.md): the world comes from
// `mpirun`; this section only tunes it or insists on a size.
struct DistributedConfig {
  int world_size = 0;                 // 0: whatever the MPI launcher gives (1 without one)
  double bucket_mb = 25;              // gradient bucket size; 0: one allreduce per gradient
  double collective_timeout_s = 300;  // a collective waiting longer fails the run; 0: no limit
  ConfigPos pos;
};

struct RunConfig {
  std::string path;      // the config file
  std::string base_dir;  // its folder: inputs are relative to it
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_where;  // "run.yaml:3:5" of each plugins entry
  std::string device = "cpu";             // NAME[:N], checked against the registry by OpenConfigDevice
  ConfigPos device_pos;                   // of the `device:` value; line 0 when the config has none
  std::string executor = "taskgraph";
  int threads = 0;
  bool fuse = true;  // run the fusion pass (nabla/fusion.h) on the cpu device
  // fp32 | bf16: bf16 runs GEMMs and convolutions in bfloat16 (the
  // mixed-precision pass, nabla/mixed_precision.h) where the CPU has bf16
  // instructions, and fp32 elsewhere (saying so once).
  std::string precision = "fp32";
  uint64_t seed = 0;
  // The program: a file (resolved) or an inline mapping, kept as text whose
  // line numbers are those of the config file.
  std::string program_path;
  std::string program_text;
  ConfigPos program_pos;
  std::string loss;
  ConfigPos loss_pos;
  std::vector<std::string> params;  // empty: every trainable persistable var
  std::vector<std::string> no_grad;
  ConfigPos params_pos, no_grad_pos;  // of each list, for errors naming a var of it
  OptimizerConfig optimizer;
  DataConfig data;
  int64_t epochs = 0;  // 0: unset (1 epoch, or no epoch limit when `steps` is set)
  int64_t steps = 0;   // 0: no step limit
  AccuracyConfig accuracy;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  DistributedConfig distributed;
};

// Parses and checks a run config. Relative input paths (program, plugins,
// data files) are resolved against the config's folder; output paths
// (checkpoint dir, metrics file, plot) against the working directory.
RunConfig LoadRunConfig(const std::string& path);
RunConfig ParseRunConfig(const std::string& yaml_text, const std::string& source_name, const std::string& base_dir);
// Loads the config's `plugins:`; asked for by name, each that fails is an
// error naming the config's file and line.
void LoadConfigPlugins(const RunConfig& c);
// Loads the config's `plugins:` (LoadConfigPlugins), then opens its device:
// plugins first, so `device:` may name a device plugin's backend that
// `plugins:` loads. A name no loaded backend registered, or a device the
// backend refuses (an index past its devices), is an error at the `device:`
// key listing the known backends.
Device& OpenConfigDevice(const RunConfig& c);

}  // namespace nabla::train
