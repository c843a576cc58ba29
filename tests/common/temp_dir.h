#pragma once
// A scratch folder per test, under the system temp dir, removed with the
// object: also when an ASSERT returns early, which a remove_all at the end
// of the test body misses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace nabla::test_util {

class TempDir {
 public:
  // <temp>/<prefix>_<suite>.<test>_<pid>. A parameterized test's name holds
  // '/', which would nest the folder and leave its parent behind.
  explicit TempDir(const std::string& prefix = "nabla") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = prefix + "_" + info->test_suite_name() + "." + info->name() + "_" + std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '.';
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;  // never throw from a destructor
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string Path(const std::string& name) const { return (path_ / name).string(); }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }
  const std::filesystem::path& Dir() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace nabla::test_util
