#pragma once
// Helpers shared by the training tests: scratch folders and expected errors.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "../common/temp_dir.h"
#include "nabla/error.h"

namespace nabla::train::testing {

using test_util::TempDir;

// The message of the nabla::Error `fn` throws ("" when it does not throw).
inline std::string ErrorOf(const std::function<void()>& fn, ErrorKind* kind = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

}  // namespace nabla::train::testing
