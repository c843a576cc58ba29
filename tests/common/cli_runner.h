#pragma once
// Running the `nabla` binary from a test, as a user would: one shell
// command, stdout and stderr captured, the exit code decoded. Shared by the
// suites that drive the binary (e2e, plugins) so they judge the CLI's
// contract (exit 2, one `nabla: error:` line naming the culprit) the same way.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace nabla::testing_cli {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  std::vector<std::string> OutLines() const { return Lines(out); }
  std::vector<std::string> ErrLines() const { return Lines(err); }
};

// Single-quotes `s` for /bin/sh.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `env binary args` (args already quoted); the captured streams go to
// `capture_base` + ".stdout"/".stderr", which are removed afterwards.
inline Result RunBinary(const std::string& binary, const std::string& args, const std::string& env,
                        const std::string& capture_base) {
  const std::string out = capture_base + ".stdout", err = capture_base + ".stderr";
  const std::string cmd = env + " " + Quote(binary) + " " + args + " >" + Quote(out) + " 2>" + Quote(err);
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// The CLI's contract for bad input: exit 2 and exactly one stderr line
// `nabla: error: ...` containing every fragment.
inline void ExpectOneLineError(const Result& r, const std::string& what, const std::vector<std::string>& fragments,
                               int code = 2) {
  EXPECT_EQ(r.code, code) << what << "\nstderr: " << r.err;
  const std::vector<std::string> lines = r.ErrLines();
  ASSERT_EQ(lines.size(), 1u) << what << "\nstderr: " << r.err;
  EXPECT_EQ(lines[0].rfind("nabla: error: ", 0), 0u) << lines[0];
  for (const std::string& f : fragments) EXPECT_NE(lines[0].find(f), std::string::npos) << f << " not in: " << lines[0];
}

}  // namespace nabla::testing_cli
