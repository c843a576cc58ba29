#pragma once
// Checks shared by commands that write one output file (-o FILE).
#include <filesystem>
#include <string>

#include "nabla/error.h"

namespace nabla::app {

// A missing folder is bad input (exit 2), found before any work is done;
// the atomic writers would only fail at the end, as an I/O error.
inline void CheckOutputFolder(const std::string& option, const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  NABLA_ENFORCE(std::filesystem::is_directory(dir, ec), kNotFound, option, " ", path, ": expected an existing folder ",
                "but ", dir.string(), " does not exist");
}

}  // namespace nabla::app
