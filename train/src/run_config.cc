#include "nabla/train/run_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/plugin.h"
#include "nabla/train/dataset.h"

namespace nabla::train {

std::string ConfigPos::Where() const {
  if (line <= 0) return file;
  return StrCat(file, ":", line, ":", col);
}

namespace {

namespace fs = std::filesystem;

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The backends a `device:` may name now: the host's, the core's, and those
// of the device plugins loaded or found so far.
std::vector<std::string> KnownDevices() {
  cpu::InitCpuBackend();  // the host registers "cpu" (idempotent)
  return DeviceBackendNames();
}

// Reads typed values out of YAML nodes, turning every problem into one
// Error that names file:line:col (yaml-cpp marks are 0-based; a missing
// key has a null mark, so messages about it point at the parent mapping).
class Reader {
 public:
  Reader(std::string file, std::string base_dir) : file_(std::move(file)), base_dir_(std::move(base_dir)) {}

  ConfigPos Pos(const YAML::Node& node) const {
    ConfigPos p{file_};
    const YAML::Mark m = node.Mark();
    if (!m.is_null()) {
      p.line = m.line + 1;
      p.col = m.column + 1;
    }
    return p;
  }
  std::string Where(const YAML::Node& node) const { return Pos(node).Where(); }

  static std::string Describe(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        return "'" + node.Scalar() + "'";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Null:
        return "nothing (null)";
      default:
        return "an undefined value";
    }
  }

  void ExpectMap(const YAML::Node& node, const std::string& what) const {
    NABLA_ENFORCE(node.IsMap(), kInvalidArgument, Where(node), ": ", what, " must be a mapping, but received ",
                  Describe(node));
  }

  // Every key of `node` must be one of `keys`, and appear once: yaml-cpp
  // keeps a repeated key, and node[key] finds the first, so `epochs: 1` then
  // `epochs: 3` silently trained one epoch.
  void CheckKeys(const YAML::Node& node, const std::string& what, const std::vector<std::string>& keys) const {
    std::map<std::string, YAML::Node> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: `it->first` lives in a temporary
      NABLA_ENFORCE(k.IsScalar(), kInvalidArgument, Where(k), ": ", what, " has a key that is not a string");
      const std::string& name = k.Scalar();
      NABLA_ENFORCE(std::find(keys.begin(), keys.end(), name) != keys.end(), kInvalidArgument, Where(k),
                    ": unknown key '", name, "' in ", what, "; expected one of: ", Join(keys));
      CheckFirst(seen, k);
    }
  }

  // `key` must not repeat one of `seen` (by name), which it joins.
  void CheckFirst(std::map<std::string, YAML::Node>& seen, const YAML::Node& key) const {
    auto [it, fresh] = seen.emplace(key.Scalar(), key);
    if (fresh) return;
    const ConfigPos first = Pos(it->second);
    NABLA_THROW(kInvalidArgument, Where(key), ": duplicate key '", key.Scalar(), "' (first at ", first.line, ":",
                first.col, ")");
  }

  YAML::Node Required(const YAML::Node& map, const std::string& key, const std::string& what) const {
    YAML::Node v = map[key];
    NABLA_ENFORCE(v && !v.IsNull(), kInvalidArgument, Where(map), ": ", what, " needs the key '", key,
                  "', but it is missing");
    return v;
  }

  std::string String(const YAML::Node& node, const std::string& what) const {
    NABLA_ENFORCE(node.IsScalar(), kInvalidArgument, Where(node), ": ", what, " must be a string, but received ",
                  Describe(node));
    return node.Scalar();
  }
  std::string NonEmptyString(const YAML::Node& node, const std::string& what) const {
    std::string s = String(node, what);
    NABLA_ENFORCE(!s.empty(), kInvalidArgument, Where(node), ": ", what, " must not be empty");
    return s;
  }

  double Double(const YAML::Node& node, const std::string& what) const {
    double v = 0;
    NABLA_ENFORCE(node.IsScalar() && YAML::convert<double>::decode(node, v), kInvalidArgument, Where(node), ": ", what,
                  " must be a number, but received ", Describe(node));
    NABLA_ENFORCE(std::isfinite(v), kInvalidArgument, Where(node), ": ", what, " must be finite, but received ",
                  Describe(node));
    return v;
  }
  double NonNegative(const YAML::Node& node, const std::string& what) const {
    double v = Double(node, what);
    NABLA_ENFORCE(v >= 0, kInvalidArgument, Where(node), ": ", what, " must be >= 0, but received ", v);
    return v;
  }
  double Positive(const YAML::Node& node, const std::string& what) const {
    double v = Double(node, what);
    NABLA_ENFORCE(v > 0, kInvalidArgument, Where(node), ": ", what, " must be > 0, but received ", v);
    return v;
  }

  int64_t Int(const YAML::Node& node, const std::string& what, int64_t min_value) const {
    int64_t v = 0;
    NABLA_ENFORCE(node.IsScalar() && YAML::convert<int64_t>::decode(node, v), kInvalidArgument, Where(node), ": ", what,
                  " must be an integer, but received ", Describe(node));
    NABLA_ENFORCE(v >= min_value, kInvalidArgument, Where(node), ": ", what, " must be >= ", min_value,
                  ", but received ", v);
    return v;
  }

  bool Bool(const YAML::Node& node, const std::string& what) const {
    bool v = false;
    NABLA_ENFORCE(node.IsScalar() && YAML::convert<bool>::decode(node, v), kInvalidArgument, Where(node), ": ", what,
                  " must be true or false, but received ", Describe(node));
    return v;
  }

  std::vector<std::string> StringList(const YAML::Node& node, const std::string& what) const {
    NABLA_ENFORCE(node.IsSequence() || node.IsNull(), kInvalidArgument, Where(node), ": ", what,
                  " must be a list of strings, but received ", Describe(node));
    std::vector<std::string> out;
    for (const auto& item : node) out.push_back(NonEmptyString(item, what + " entry"));
    return out;
  }

  // NAME or NAME:N. Only the form is checked here: whether NAME is a
  // registered backend is known once the config's `plugins:` have loaded (a
  // device plugin among them adds its backend), so OpenConfigDevice checks
  // it, at this key's position.
  std::string Device(const YAML::Node& node) const {
    // `device: null` is YAML's null, not the string: it can only mean the
    // null device.
    if (node.IsNull()) return "null";
    const std::string s = String(node, "device");
    const size_t colon = s.find(':');
    bool ok = colon != 0 && (colon == std::string::npos || (colon + 1 < s.size() && s.size() - colon - 1 <= 6));
    for (size_t i = colon == std::string::npos ? s.size() : colon + 1; i < s.size(); ++i)
      ok = ok && s[i] >= '0' && s[i] <= '9';
    NABLA_ENFORCE(ok, kInvalidArgument, Where(node),
                  ": device must be a registered device, NAME or NAME:N with N an index (", Join(KnownDevices()),
                  "), but received '", s, "'");
    return s;
  }

  std::string Choice(const YAML::Node& node, const std::string& what, const std::vector<std::string>& choices) const {
    std::string s = String(node, what);
    NABLA_ENFORCE(std::find(choices.begin(), choices.end(), s) != choices.end(), kInvalidArgument, Where(node), ": ",
                  what, " must be one of ", Join(choices), ", but received '", s, "'");
    return s;
  }

  std::string InputPath(const std::string& p) const {
    fs::path path(p);
    if (path.is_absolute() || base_dir_.empty()) return path.lexically_normal().string();
    return (fs::path(base_dir_) / path).lexically_normal().string();
  }

  const std::string& File() const { return file_; }

 private:
  std::string file_;
  std::string base_dir_;
};

// The inline program as text with the config's own line and column numbers:
// blank lines before it, and the lines of the mapping's block (everything
// indented deeper than the `program:` key) kept as they are, so positions
// the program loader reports point into the config file.
std::string InlineProgramText(const std::string& config_text, const YAML::Node& key, const YAML::Node& value) {
  std::vector<std::string> lines;
  {
    std::istringstream is(config_text);
    std::string line;
    while (std::getline(is, line)) lines.push_back(line);
  }
  const YAML::Mark km = key.Mark();
  const YAML::Mark vm = value.Mark();
  std::string out;
  for (int i = 0; i < vm.line; ++i) out += "\n";
  if (vm.line < 0 || static_cast<size_t>(vm.line) >= lines.size()) return out;
  std::string first = lines[vm.line];
  // A flow mapping or a block mapping that starts on the key's line: blank
  // out what precedes the value so the columns stay right.
  for (int c = 0; c < vm.column && c < static_cast<int>(first.size()); ++c) first[c] = ' ';
  out += first + "\n";
  for (size_t i = vm.line + 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    size_t indent = l.find_first_not_of(' ');
    bool blank_or_comment = indent == std::string::npos || l[indent] == '#';
    if (!blank_or_comment && static_cast<int>(indent) <= km.column) break;
    out += l + "\n";
  }
  return out;
}

void ParseSchedule(const Reader& r, const YAML::Node& n, LrSchedule& s) {
  s.pos = r.Pos(n);
  const std::vector<std::string> types = {"constant", "step", "exponential", "cosine"};
  if (n.IsScalar()) {
    s.type = r.Choice(n, "optimizer.lr_schedule", types);
    return;
  }
  r.ExpectMap(n, "optimizer.lr_schedule");
  r.CheckKeys(n, "optimizer.lr_schedule", {"type", "gamma", "every_epochs", "final_lr", "warmup_steps"});
  s.type = r.Choice(r.Required(n, "type", "optimizer.lr_schedule"), "optimizer.lr_schedule.type", types);
  if (n["gamma"]) {
    s.gamma = r.Double(n["gamma"], "optimizer.lr_schedule.gamma");
    NABLA_ENFORCE(s.gamma > 0 && s.gamma <= 1, kInvalidArgument, r.Where(n["gamma"]),
                  ": optimizer.lr_schedule.gamma must be in (0, 1], but received ", s.gamma);
  }
  if (n["every_epochs"]) s.every_epochs = r.Int(n["every_epochs"], "optimizer.lr_schedule.every_epochs", 1);
  if (n["final_lr"]) s.final_lr = r.NonNegative(n["final_lr"], "optimizer.lr_schedule.final_lr");
  if (n["warmup_steps"]) s.warmup_steps = r.Int(n["warmup_steps"], "optimizer.lr_schedule.warmup_steps", 0);
  auto only_for = [&](const char* key, std::vector<std::string> for_types) {
    if (!n[key]) return;
    NABLA_ENFORCE(std::find(for_types.begin(), for_types.end(), s.type) != for_types.end(), kInvalidArgument,
                  r.Where(n[key]), ": optimizer.lr_schedule.", key, " applies to type ", Join(for_types),
                  ", but the schedule type is '", s.type, "'");
  };
  only_for("gamma", {"step", "exponential"});
  only_for("every_epochs", {"step"});
  only_for("final_lr", {"cosine"});
}

void ParseOptimizer(const Reader& r, const YAML::Node& n, OptimizerConfig& o) {
  r.ExpectMap(n, "optimizer");
  r.CheckKeys(n, "optimizer",
              {"type", "lr", "momentum", "nesterov", "beta1", "beta2", "epsilon", "weight_decay", "clip_global_norm",
               "lr_schedule"});
  o.pos = r.Pos(n);
  if (n["type"]) o.type = r.Choice(n["type"], "optimizer.type", {"sgd", "momentum", "adam", "adamw"});
  if (n["lr"]) o.lr = r.Positive(n["lr"], "optimizer.lr");
  if (n["momentum"]) o.momentum = r.NonNegative(n["momentum"], "optimizer.momentum");
  if (n["nesterov"]) o.nesterov = r.Bool(n["nesterov"], "optimizer.nesterov");
  auto unit = [&](const char* key, double* out) {
    if (!n[key]) return;
    double v = r.Double(n[key], std::string("optimizer.") + key);
    NABLA_ENFORCE(v >= 0 && v < 1, kInvalidArgument, r.Where(n[key]), ": optimizer.", key,
                  " must be in [0, 1), but received ", v);
    *out = v;
  };
  unit("beta1", &o.beta1);
  unit("beta2", &o.beta2);
  if (n["epsilon"]) o.epsilon = r.Positive(n["epsilon"], "optimizer.epsilon");
  if (n["weight_decay"]) o.weight_decay = r.NonNegative(n["weight_decay"], "optimizer.weight_decay");
  if (n["clip_global_norm"]) o.clip_global_norm = r.NonNegative(n["clip_global_norm"], "optimizer.clip_global_norm");
  if (n["lr_schedule"]) ParseSchedule(r, n["lr_schedule"], o.schedule);
  // Keys that only one optimizer reads are errors for the others: a user who
  // sets `nesterov` on adam expects it to matter.
  auto only_for = [&](const char* key, std::initializer_list<const char*> types) {
    bool ok = !n[key];
    for (const char* t : types) ok = ok || o.type == t;
    NABLA_ENFORCE(ok, kInvalidArgument, r.Where(n[key]), ": optimizer.", key, " applies to type ",
                  Join(std::vector<std::string>(types.begin(), types.end())), ", but the optimizer type is '", o.type,
                  "'");
  };
  only_for("momentum", {"momentum"});
  only_for("nesterov", {"momentum"});
  only_for("beta1", {"adam", "adamw"});
  only_for("beta2", {"adam", "adamw"});
  only_for("epsilon", {"adam", "adamw"});
}

void ParseSplit(const Reader& r, const YAML::Node& n, const std::string& what, const std::string& format,
                SplitConfig& s) {
  r.ExpectMap(n, what);
  s.present = true;
  s.pos = r.Pos(n);
  if (format == "csv") {
    r.CheckKeys(n, what, {"path", "feeds"});
    s.path = r.InputPath(r.NonEmptyString(r.Required(n, "path", what), what + ".path"));
    s.file_pos["path"] = r.Pos(n["path"]);
  } else if (format == "text") {
    r.CheckKeys(n, what, {"files", "exclude", "feeds"});
    YAML::Node files = r.Required(n, "files", what);
    const std::vector<std::string> patterns = files.IsScalar()
                                                  ? std::vector<std::string>{r.NonEmptyString(files, what + ".files")}
                                                  : r.StringList(files, what + ".files");
    NABLA_ENFORCE(!patterns.empty(), kInvalidArgument, r.Where(files), ": ", what, ".files is empty");
    for (const auto& p : patterns) s.text_files.push_back(r.InputPath(p));
    s.file_pos["files"] = r.Pos(files);
    if (n["exclude"]) {
      const YAML::Node ex = n["exclude"];
      s.text_exclude = ex.IsScalar() ? std::vector<std::string>{r.NonEmptyString(ex, what + ".exclude")}
                                     : r.StringList(ex, what + ".exclude");
    }
  } else {
    r.CheckKeys(n, what, {"files", "feeds"});
    YAML::Node files = r.Required(n, "files", what);
    r.ExpectMap(files, what + ".files");
    std::map<std::string, YAML::Node> seen;
    for (auto it = files.begin(); it != files.end(); ++it) {
      std::string col = r.NonEmptyString(it->first, what + ".files key");
      r.CheckFirst(seen, it->first);
      s.files[col] = r.InputPath(r.NonEmptyString(it->second, what + ".files." + col));
      s.file_pos[col] = r.Pos(it->second);
    }
    NABLA_ENFORCE(!s.files.empty(), kInvalidArgument, r.Where(files), ": ", what, ".files is empty");
  }
  YAML::Node feeds = r.Required(n, "feeds", what);
  r.ExpectMap(feeds, what + ".feeds");
  std::map<std::string, YAML::Node> seen_feeds;
  for (auto it = feeds.begin(); it != feeds.end(); ++it) {
    FeedConfig f;
    f.var = r.NonEmptyString(it->first, what + ".feeds key");
    r.CheckFirst(seen_feeds, it->first);
    f.pos = r.Pos(it->first);
    const std::string fw = what + ".feeds." + f.var;
    const YAML::Node v = it->second;  // a copy: `it->second` lives in a temporary
    if (v.IsMap()) {
      r.CheckKeys(v, fw, {"column", "scale"});
      f.column = r.NonEmptyString(r.Required(v, "column", fw), fw + ".column");
      if (v["scale"]) f.scale = r.Double(v["scale"], fw + ".scale");
    } else {
      f.column = r.NonEmptyString(v, fw);
    }
    if (format == "text") {
      NABLA_ENFORCE(f.column == "inputs" || f.column == "labels", kInvalidArgument, r.Where(v), ": ", fw,
                    " names the column '", f.column, "', but a text dataset has the columns inputs, labels");
    } else if (format != "csv") {
      NABLA_ENFORCE(s.files.count(f.column), kInvalidArgument, r.Where(v), ": ", fw, " names the column '", f.column,
                    "', but ", what, ".files has no such key");
    }
    s.feeds.push_back(std::move(f));
  }
  NABLA_ENFORCE(!s.feeds.empty(), kInvalidArgument, r.Where(feeds), ": ", what, ".feeds is empty");
}

void ParseData(const Reader& r, const YAML::Node& n, DataConfig& d) {
  r.ExpectMap(n, "data");
  r.CheckKeys(n, "data",
              {"format", "train", "eval", "batch_size", "eval_batch_size", "shuffle", "seed", "drop_last", "header",
               "delimiter", "seq_len", "eval_fraction", "samples_per_epoch"});
  d.pos = r.Pos(n);
  if (n["format"]) d.format = r.Choice(n["format"], "data.format", {"idx", "csv", "npy", "text"});
  ParseSplit(r, r.Required(n, "train", "data"), "data.train", d.format, d.train);
  if (n["eval"] && !n["eval"].IsNull()) ParseSplit(r, n["eval"], "data.eval", d.format, d.eval);
  if (n["batch_size"]) d.batch_size = r.Int(n["batch_size"], "data.batch_size", 1);
  if (n["eval_batch_size"]) d.eval_batch_size = r.Int(n["eval_batch_size"], "data.eval_batch_size", 0);
  if (n["shuffle"]) d.shuffle = r.Bool(n["shuffle"], "data.shuffle");
  if (n["seed"]) d.seed = static_cast<uint64_t>(r.Int(n["seed"], "data.seed", 0));
  if (n["drop_last"]) d.drop_last = r.Bool(n["drop_last"], "data.drop_last");
  auto csv_only = [&](const char* key) {
    NABLA_ENFORCE(!n[key] || d.format == "csv", kInvalidArgument, r.Where(n[key]), ": data.", key,
                  " applies to format csv, but the format is '", d.format, "'");
  };
  csv_only("header");
  csv_only("delimiter");
  auto text_only = [&](const char* key) {
    NABLA_ENFORCE(!n[key] || d.format == "text", kInvalidArgument, r.Where(n[key]), ": data.", key,
                  " applies to format text, but the format is '", d.format, "'");
  };
  text_only("seq_len");
  text_only("eval_fraction");
  if (d.format == "text") {
    const YAML::Node seq = r.Required(n, "seq_len", "data (format text)");
    d.seq_len = r.Int(seq, "data.seq_len", 1);
    NABLA_ENFORCE(d.seq_len <= kMaxTextSeqLen, kInvalidArgument, r.Where(seq),
                  ": data.seq_len must be at most 2^30 (a window is seq_len + 1 bytes), but received ", d.seq_len);
  }
  if (n["eval_fraction"]) {
    d.eval_fraction = r.NonNegative(n["eval_fraction"], "data.eval_fraction");
    NABLA_ENFORCE(d.eval_fraction < 1, kInvalidArgument, r.Where(n["eval_fraction"]),
                  ": data.eval_fraction must be below 1, but received ", d.eval_fraction);
    NABLA_ENFORCE(!d.eval.present || d.eval_fraction == 0, kInvalidArgument, r.Where(n["eval_fraction"]),
                  ": data.eval_fraction holds out part of data.train for evaluation, but data.eval is given too; "
                  "keep one");
  }
  if (n["samples_per_epoch"]) d.samples_per_epoch = r.Int(n["samples_per_epoch"], "data.samples_per_epoch", 1);
  if (n["header"]) d.csv_header = r.Bool(n["header"], "data.header");
  if (n["delimiter"]) {
    std::string s = r.String(n["delimiter"], "data.delimiter");
    if (s == "\\t") s = "\t";
    NABLA_ENFORCE(s.size() == 1 && s[0] != '"' && s[0] != '\n', kInvalidArgument, r.Where(n["delimiter"]),
                  ": data.delimiter must be one character (e.g. ',', ';', '\\t'), but received '", s, "'");
    d.csv_delimiter = s[0];
  }
}

void ParseMetrics(const Reader& r, const YAML::Node& n, AccuracyConfig& a) {
  r.ExpectMap(n, "metrics");
  r.CheckKeys(n, "metrics", {"accuracy"});
  if (!n["accuracy"]) return;
  const YAML::Node& acc = n["accuracy"];
  a.pos = r.Pos(acc);
  if (acc.IsNull()) {
    a.enabled = true;
    return;
  }
  if (acc.IsScalar()) {
    a.enabled = r.Bool(acc, "metrics.accuracy");
    return;
  }
  r.ExpectMap(acc, "metrics.accuracy");
  r.CheckKeys(acc, "metrics.accuracy", {"logits", "label", "k"});
  a.enabled = true;
  if (acc["logits"]) a.logits = r.NonEmptyString(acc["logits"], "metrics.accuracy.logits");
  if (acc["label"]) a.label = r.NonEmptyString(acc["label"], "metrics.accuracy.label");
  if (acc["k"]) a.k = static_cast<int>(r.Int(acc["k"], "metrics.accuracy.k", 1));
}

void ParseCheckpoint(const Reader& r, const YAML::Node& n, CheckpointConfig& c) {
  r.ExpectMap(n, "checkpoint");
  r.CheckKeys(n, "checkpoint", {"dir", "every_steps", "every_epoch", "keep_last", "resume"});
  c.pos = r.Pos(n);
  c.dir = r.NonEmptyString(r.Required(n, "dir", "checkpoint"), "checkpoint.dir");
  if (n["every_steps"]) c.every_steps = r.Int(n["every_steps"], "checkpoint.every_steps", 0);
  if (n["every_epoch"]) c.every_epoch = r.Bool(n["every_epoch"], "checkpoint.every_epoch");
  if (n["keep_last"]) c.keep_last = static_cast<int>(r.Int(n["keep_last"], "checkpoint.keep_last", 0));
  if (n["resume"]) c.resume = r.Bool(n["resume"], "checkpoint.resume");
}

void ParseLogging(const Reader& r, const YAML::Node& n, LoggingConfig& l) {
  r.ExpectMap(n, "logging");
  r.CheckKeys(n, "logging", {"every_steps", "metrics_file", "plot", "progress"});
  l.pos = r.Pos(n);
  if (n["every_steps"]) l.every_steps = r.Int(n["every_steps"], "logging.every_steps", 1);
  if (n["metrics_file"]) {
    l.metrics_file = r.NonEmptyString(n["metrics_file"], "logging.metrics_file");
    std::string ext = fs::path(l.metrics_file).extension().string();
    NABLA_ENFORCE(ext == ".csv" || ext == ".jsonl", kInvalidArgument, r.Where(n["metrics_file"]),
                  ": logging.metrics_file must end in .csv or .jsonl, but received '", l.metrics_file, "'");
  }
  if (n["plot"]) {
    const YAML::Node& p = n["plot"];
    bool flag = false;
    if (p.IsScalar() && YAML::convert<bool>::decode(p, flag)) {
      // `plot: true` draws next to the metrics file.
      NABLA_ENFORCE(!flag || !l.metrics_file.empty(), kInvalidArgument, r.Where(p),
                    ": logging.plot: true draws the metrics file, but logging.metrics_file is not set");
      l.plot = flag ? fs::path(l.metrics_file).replace_extension(".png").string() : "";
    } else {
      l.plot = r.NonEmptyString(p, "logging.plot");
      std::string ext = fs::path(l.plot).extension().string();
      NABLA_ENFORCE(ext == ".png" || ext == ".svg" || ext == ".txt", kInvalidArgument, r.Where(p),
                    ": logging.plot must be true, false or a file ending in .png, .svg or .txt, but received '", l.plot,
                    "'");
      NABLA_ENFORCE(!l.metrics_file.empty(), kInvalidArgument, r.Where(p),
                    ": logging.plot draws the metrics file, but logging.metrics_file is not set");
    }
  }
  if (n["progress"]) l.progress = r.Choice(n["progress"], "logging.progress", {"auto", "bar", "lines", "none"});
}

void ParseDistributed(const Reader& r, const YAML::Node& n, DistributedConfig& d) {
  r.ExpectMap(n, "distributed");
  r.CheckKeys(n, "distributed", {"world_size", "bucket_mb", "collective_timeout_s"});
  d.pos = r.Pos(n);
  if (n["world_size"]) d.world_size = static_cast<int>(r.Int(n["world_size"], "distributed.world_size", 0));
  if (n["bucket_mb"]) d.bucket_mb = r.NonNegative(n["bucket_mb"], "distributed.bucket_mb");
  if (n["collective_timeout_s"]) {
    d.collective_timeout_s = r.NonNegative(n["collective_timeout_s"], "distributed.collective_timeout_s");
  }
}

}  // namespace

RunConfig ParseRunConfig(const std::string& yaml_text, const std::string& source_name, const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    NABLA_THROW(kInvalidArgument, source_name, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  }
  Reader r(source_name, base_dir);
  RunConfig c;
  c.path = source_name;
  c.base_dir = base_dir;
  NABLA_ENFORCE(root.IsMap(), kInvalidArgument, source_name, ":1:1: a run config must be a mapping, but received ",
                Reader::Describe(root));
  r.CheckKeys(root, "the run config",
              {"plugins", "device", "executor", "threads", "fuse", "precision", "seed", "program", "loss", "params",
               "no_grad", "optimizer", "data", "epochs", "steps", "metrics", "checkpoint", "logging", "distributed"});
  try {
    if (root["plugins"]) {
      for (const auto& p : r.StringList(root["plugins"], "plugins")) c.plugins.push_back(r.InputPath(p));
      for (size_t i = 0; i < c.plugins.size(); ++i) c.plugin_where.push_back(r.Where(root["plugins"][i]));
    }
    if (root["device"]) {
      c.device = r.Device(root["device"]);
      c.device_pos = r.Pos(root["device"]);
    }
    if (root["executor"]) {
      // Executors are the core's and the host backend's (no plugin adds
      // one), so the name is checked here, at the key: later it failed
      // without a position.
      cpu::InitCpuBackend();
      c.executor = r.Choice(root["executor"], "executor", ExecutorNames());
    }
    if (root["threads"]) c.threads = static_cast<int>(r.Int(root["threads"], "threads", 0));
    if (root["fuse"]) c.fuse = r.Bool(root["fuse"], "fuse");
    if (root["precision"]) c.precision = r.Choice(root["precision"], "precision", {"fp32", "bf16"});
    if (root["seed"]) c.seed = static_cast<uint64_t>(r.Int(root["seed"], "seed", 0));

    // The program key: find the key node itself for the inline case, its
    // column bounds the inline block.
    YAML::Node program = r.Required(root, "program", "the run config");
    c.program_pos = r.Pos(program);
    if (program.IsScalar()) {
      c.program_path = r.InputPath(r.NonEmptyString(program, "program"));
    } else {
      NABLA_ENFORCE(program.IsMap(), kInvalidArgument, r.Where(program),
                    ": program must be a file path or an inline program mapping, but received ",
                    Reader::Describe(program));
      // The key is there once: CheckKeys refused a second one (which, found
      // by tests/fuzz/fuzz_run_config, sent the inline-text cut past the end
      // of the file).
      for (auto it = root.begin(); it != root.end(); ++it) {
        if (it->first.Scalar() == "program") c.program_text = InlineProgramText(yaml_text, it->first, it->second);
      }
    }

    YAML::Node loss = r.Required(root, "loss", "the run config");
    c.loss = r.NonEmptyString(loss, "loss");
    c.loss_pos = r.Pos(loss);
    if (root["params"]) {
      c.params = r.StringList(root["params"], "params");
      c.params_pos = r.Pos(root["params"]);
    }
    if (root["no_grad"]) {
      c.no_grad = r.StringList(root["no_grad"], "no_grad");
      c.no_grad_pos = r.Pos(root["no_grad"]);
    }
    if (root["optimizer"]) ParseOptimizer(r, root["optimizer"], c.optimizer);
    ParseData(r, r.Required(root, "data", "the run config"), c.data);
    if (root["epochs"]) c.epochs = r.Int(root["epochs"], "epochs", 1);
    if (root["steps"]) c.steps = r.Int(root["steps"], "steps", 0);
    if (root["metrics"] && !root["metrics"].IsNull()) ParseMetrics(r, root["metrics"], c.accuracy);
    if (root["checkpoint"] && !root["checkpoint"].IsNull()) ParseCheckpoint(r, root["checkpoint"], c.checkpoint);
    if (root["logging"] && !root["logging"].IsNull()) ParseLogging(r, root["logging"], c.logging);
    if (root["distributed"] && !root["distributed"].IsNull()) ParseDistributed(r, root["distributed"], c.distributed);
  } catch (const YAML::Exception& e) {
    // Anything yaml-cpp itself rejects (it should not get here: every read
    // above checks first).
    NABLA_THROW(kInvalidArgument, source_name, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
  return c;
}

RunConfig LoadRunConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the run config (", std::strerror(errno), ")");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string base = fs::path(path).parent_path().string();
  return ParseRunConfig(ss.str(), path, base);
}

void LoadConfigPlugins(const RunConfig& c) {
  for (size_t i = 0; i < c.plugins.size(); ++i) {
    try {
      PluginManager::Instance().Load(c.plugins[i]);
    } catch (const Error& e) {
      ThrowError(e.kind(),
                 StrCat(i < c.plugin_where.size() ? c.plugin_where[i] : c.path, ": plugins[", i, "]: ", e.what()));
    }
  }
}

Device& OpenConfigDevice(const RunConfig& c) {
  LoadConfigPlugins(c);
  const std::string where = c.device_pos.line > 0 ? c.device_pos.Where() : c.path;
  const std::string name = c.device.substr(0, c.device.find(':'));
  const std::vector<std::string> names = KnownDevices();
  NABLA_ENFORCE(std::find(names.begin(), names.end(), name) != names.end(), kInvalidArgument, where,
                ": device must be a registered device, NAME or NAME:N with N an index (", Join(names),
                "), but received '", c.device, "'");
  try {
    return ResolveDevice(c.device);
  } catch (const Error& e) {
    // A backend's own refusal (no such index, no driver): at the key too.
    ThrowError(e.kind(), StrCat(where, ": device '", c.device, "': ", e.what()));
  }
}

}  // namespace nabla::train
