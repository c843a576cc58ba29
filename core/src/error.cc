#include "nabla/error.h"

namespace nabla {

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "InvalidArgument";
    case ErrorKind::kNotFound:
      return "NotFound";
    case ErrorKind::kAlreadyExists:
      return "AlreadyExists";
    case ErrorKind::kOutOfRange:
      return "OutOfRange";
    case ErrorKind::kPreconditionNotMet:
      return "PreconditionNotMet";
    case ErrorKind::kUnimplemented:
      return "Unimplemented";
    case ErrorKind::kExternal:
      return "External";
    case ErrorKind::kRuntime:
      return "Runtime";
  }
  return "Unknown";
}

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

bool Error::IsBadInput() const {
  switch (kind_) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kNotFound:
    case ErrorKind::kAlreadyExists:
    case ErrorKind::kOutOfRange:
    case ErrorKind::kPreconditionNotMet:
    case ErrorKind::kUnimplemented:
      return true;
    default:
      return false;
  }
}

void ThrowError(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

std::string OneLineMessage(const std::string& message) {
  std::string out;
  for (char c : message) {
    if (c == '\n') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

}  // namespace nabla
