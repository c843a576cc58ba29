#pragma once
// One exception type for every failure nabla reports. A message says what
// failed, what was expected and what was received, and where (file:line:col,
// op type and index, plugin path). The CLI prints it as one line; kind() picks
// the exit code (bad input: 2, anything else: 1).
#include <sstream>
#include <stdexcept>
#include <string>

#include "nabla/export.h"

namespace nabla {

enum class ErrorKind {
  kInvalidArgument,     // malformed input: YAML, .npy, shapes, attributes
  kNotFound,            // a name (op, var, file, plugin) that does not exist
  kAlreadyExists,       // a duplicate registration or definition
  kOutOfRange,          // an index or value outside its domain
  kPreconditionNotMet,  // a valid request at the wrong time
  kUnimplemented,       // no kernel for this (op, device, dtype)
  kExternal,            // a library or the OS failed (OpenBLAS, OpenCL, I/O)
  kRuntime,             // the computation itself failed (NaN loss, ...)
};

NABLA_API const char* ErrorKindName(ErrorKind kind);

class NABLA_API Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const { return kind_; }
  // True when the user's input is at fault (exit code 2).
  bool IsBadInput() const;

 private:
  ErrorKind kind_;
};

// Concatenates anything streamable; used to build messages without fmt in
// public headers.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] NABLA_API void ThrowError(ErrorKind kind, const std::string& message);

// Messages are one line by contract, but a nested cause may carry newlines:
// joins the lines with "; " (the CLI's stderr line, the Python exception).
NABLA_API std::string OneLineMessage(const std::string& message);

}  // namespace nabla

// NABLA_ENFORCE(cond, kInvalidArgument, "expected ", a, " but received ", b)
#define NABLA_ENFORCE(cond, kind, ...)                                                        \
  do {                                                                                        \
    if (!(cond)) ::nabla::ThrowError(::nabla::ErrorKind::kind, ::nabla::StrCat(__VA_ARGS__)); \
  } while (0)

#define NABLA_THROW(kind, ...) ::nabla::ThrowError(::nabla::ErrorKind::kind, ::nabla::StrCat(__VA_ARGS__))
