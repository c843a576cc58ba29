#include "nabla/train/metrics.h"

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "nabla/error.h"
#include "nabla/program_io.h"

namespace nabla::train {

namespace {

namespace fs = std::filesystem;
constexpr const char* kCsvHeader = "phase,epoch,step,loss,accuracy,samples_per_sec,elapsed_s";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Num(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

int RunShell(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
}

bool GnuplotHasTerminal(const std::string& term) {
  return RunShell("gnuplot -e 'set terminal " + term + "' </dev/null >/dev/null 2>&1") == 0;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path), jsonl_(EndsWith(path, ".jsonl")) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  const bool had_rows = append && fs::exists(path, ec) && fs::file_size(path, ec) > 0;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  NABLA_ENFORCE(file_ != nullptr, kExternal, "cannot open the metrics file '", path, "': ", std::strerror(errno));
  if (!jsonl_ && !had_rows) {
    const bool ok = std::fprintf(file_, "%s\n", kCsvHeader) >= 0 && std::fflush(file_) == 0;
    if (!ok) Fail();
  }
}

// A metrics file cut short (full disk, ulimit -f) must stop the run loudly:
// the user reads the curves from it.
void MetricsWriter::Fail() {
  const std::string why = std::strerror(errno);
  std::fclose(file_);
  file_ = nullptr;
  NABLA_THROW(kExternal, "cannot write the metrics file '", path_, "': ", why);
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::Write(const MetricRow& r) {
  NABLA_ENFORCE(file_ != nullptr, kPreconditionNotMet, "the metrics file '", path_, "' is closed after a failed write");
  bool ok = true;
  if (jsonl_) {
    nlohmann::json j = {{"phase", r.phase},        {"epoch", r.epoch},
                        {"step", r.step},          {"loss", std::isfinite(r.loss) ? nlohmann::json(r.loss) : nullptr},
                        {"accuracy", nullptr},     {"samples_per_sec", r.samples_per_sec},
                        {"elapsed_s", r.elapsed_s}};
    if (r.accuracy) j["accuracy"] = *r.accuracy;
    ok = std::fprintf(file_, "%s\n", j.dump().c_str()) >= 0;
  } else {
    ok = std::fprintf(file_, "%s,%s,%lld,%s,%s,%s,%s\n", r.phase.c_str(), Num(r.epoch).c_str(),
                      static_cast<long long>(r.step), Num(r.loss).c_str(), r.accuracy ? Num(*r.accuracy).c_str() : "",
                      Num(r.samples_per_sec).c_str(), Num(r.elapsed_s).c_str()) >= 0;
  }
  if (!ok || std::fflush(file_) != 0) Fail();
}

void DropMetricsAfterStep(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::ifstream in(path);
  NABLA_ENFORCE(in.good(), kExternal, "cannot read the metrics file '", path, "': ", std::strerror(errno));
  const bool jsonl = EndsWith(path, ".jsonl");
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    std::optional<long long> row_step;
    if (jsonl) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) row_step = j["step"].get<long long>();
    } else {
      // phase,epoch,step,...
      const size_t a = line.find(','), b = a == std::string::npos ? a : line.find(',', a + 1);
      if (b != std::string::npos) {
        const std::string field = line.substr(b + 1, line.find(',', b + 1) - b - 1);
        if (!field.empty() && field.find_first_not_of("0123456789") == std::string::npos && field.size() < 19) {
          row_step = std::stoll(field);
        }
      }
    }
    if (row_step && *row_step > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  NABLA_ENFORCE(!in.bad(), kExternal, "cannot read the metrics file '", path, "': ", std::strerror(errno));
  if (dropped) WriteFileAtomically(path, kept);
}

std::vector<MetricRow> ReadMetrics(const std::string& path) {
  std::ifstream in(path);
  NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the metrics file (", std::strerror(errno), ")");
  std::vector<MetricRow> rows;
  std::string line;
  int line_no = 0;
  const bool jsonl = EndsWith(path, ".jsonl");
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == kCsvHeader) continue;
    MetricRow r;
    if (jsonl) {
      try {
        auto j = nlohmann::json::parse(line);
        r.phase = j.at("phase").get<std::string>();
        r.epoch = j.at("epoch").get<double>();
        r.step = j.at("step").get<int64_t>();
        r.loss = j.at("loss").is_null() ? NAN : j.at("loss").get<double>();
        if (!j.at("accuracy").is_null()) r.accuracy = j.at("accuracy").get<double>();
        r.samples_per_sec = j.value("samples_per_sec", 0.0);
        r.elapsed_s = j.value("elapsed_s", 0.0);
      } catch (const nlohmann::json::exception& e) {
        NABLA_THROW(kInvalidArgument, path, ":", line_no, ": not a metrics record: ", e.what());
      }
    } else {
      std::vector<std::string> f;
      std::stringstream ss(line);
      std::string cell;
      while (std::getline(ss, cell, ',')) f.push_back(cell);
      if (!line.empty() && line.back() == ',') f.push_back("");
      NABLA_ENFORCE(f.size() == 7, kInvalidArgument, path, ":", line_no, ": expected 7 fields (", kCsvHeader,
                    "), but received ", f.size());
      try {
        r.phase = f[0];
        r.epoch = std::stod(f[1]);
        r.step = std::stoll(f[2]);
        r.loss = std::stod(f[3]);
        if (!f[4].empty()) r.accuracy = std::stod(f[4]);
        r.samples_per_sec = std::stod(f[5]);
        r.elapsed_s = std::stod(f[6]);
      } catch (const std::exception&) {
        NABLA_THROW(kInvalidArgument, path, ":", line_no, ": a field is not a number: '", line, "'");
      }
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

void PlotMetrics(const std::string& metrics_path, const std::string& out) {
  std::vector<MetricRow> rows = ReadMetrics(metrics_path);
  NABLA_ENFORCE(!rows.empty(), kInvalidArgument, metrics_path, ": the metrics file has no rows to plot");
  NABLA_ENFORCE(RunShell("command -v gnuplot >/dev/null 2>&1") == 0, kNotFound,
                "cannot plot: gnuplot is not installed (apt-get install gnuplot-nox)");
  std::string ext = fs::path(out).extension().string();
  std::string terminal;
  if (ext == ".png") {
    if (GnuplotHasTerminal("pngcairo")) {
      terminal = "pngcairo size 1000,450";
    } else if (GnuplotHasTerminal("png")) {
      terminal = "png size 1000,450";
    } else {
      NABLA_THROW(kUnimplemented, "cannot plot '", out, "': this gnuplot has neither the pngcairo nor the png ",
                  "terminal; write .svg or .txt instead");
    }
  } else if (ext == ".svg") {
    terminal = "svg size 1000,450";
  } else if (ext == ".txt") {
    terminal = "dumb size 120,30";
  } else {
    NABLA_THROW(kInvalidArgument, "cannot plot '", out, "': expected a file ending in .png, .svg or .txt");
  }

  bool have_acc = false;
  std::ostringstream data[3];  // step, train, eval
  const char* phases[3] = {"step", "train", "eval"};
  for (const auto& r : rows) {
    for (int p = 0; p < 3; ++p) {
      if (r.phase != phases[p] || !std::isfinite(r.loss)) continue;
      data[p] << Num(r.epoch) << " " << Num(r.loss) << " " << (r.accuracy ? Num(*r.accuracy * 100) : "NaN") << "\n";
      if (r.accuracy) have_acc = true;
    }
  }
  std::ostringstream gp;
  gp << "set terminal " << terminal << "\n";
  gp << "set output '" << out << "'\n";
  for (int p = 0; p < 3; ++p) gp << "$" << phases[p] << " << EOD\n" << data[p].str() << "EOD\n";
  if (have_acc) gp << "set multiplot layout 1,2 title '" << fs::path(metrics_path).filename().string() << "'\n";
  gp << "set xlabel 'epoch'\nset ylabel 'loss'\nset grid\nset key top right\n";
  auto plot = [&](int col, const char* what) {
    std::string s = "plot ";
    bool first = true;
    const char* styles[3] = {"lines lc rgb '#b0b0b0' title 'train (running)'",
                             "linespoints lw 2 lc rgb '#1f77b4' title 'train'",
                             "linespoints lw 2 lc rgb '#d62728' title 'eval'"};
    for (int p = 0; p < 3; ++p) {
      if (data[p].str().empty()) continue;
      s += std::string(first ? "" : ", ") + "$" + phases[p] + " using 1:" + std::to_string(col) + " with " + styles[p];
      first = false;
    }
    (void)what;
    return s + "\n";
  };
  gp << plot(2, "loss");
  if (have_acc) {
    gp << "set ylabel 'accuracy (%)'\nset key bottom right\n";
    gp << plot(3, "accuracy");
    gp << "unset multiplot\n";
  }
  gp << "set output\n";

  const std::string script = out + ".gnuplot";
  {
    std::ofstream s(script);
    NABLA_ENFORCE(s.good(), kExternal, "cannot write '", script, "': ", std::strerror(errno));
    s << gp.str();
  }
  const std::string log = out + ".log";
  int rc = RunShell("gnuplot '" + script + "' >'" + log + "' 2>&1");
  std::string why;
  if (rc != 0) {
    std::ifstream l(log);
    std::getline(l, why, '\0');
  }
  std::error_code ec;
  fs::remove(log, ec);
  NABLA_ENFORCE(rc == 0, kExternal, "gnuplot failed drawing '", out, "' (script kept at ", script, "): ", why);
  fs::remove(script, ec);
}

}  // namespace nabla::train
