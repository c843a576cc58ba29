#pragma once
// A number written as text, as Paddle's string-valued attributes hold one
// (fill_constant's str_value): exact where a float attribute is not.
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

// Only so that, on the C ABI, the SDK's inline namespace holding the kit is
// declared first (the shim maps this header to it): see nabla/sdk/plugin.h.
#include "nabla/types.h"

namespace nabla::opkit {

// An integer read exactly (is_int), or a double.
struct NumberText {
  bool is_int = false;
  int64_t i = 0;
  double d = 0.0;

  // The value as T: an integer converts from the int64 itself, so an int64
  // beyond 2^53 stays exact; to bool, nonzero is true.
  template <typename T>
  T As() const {
    if constexpr (std::is_same_v<T, bool>)
      return is_int ? i != 0 : d != 0.0;
    else
      return is_int ? static_cast<T>(i) : static_cast<T>(d);
  }
};

// "inf", "+inf", "-inf", "nan", an integer in int64's range, or a decimal or
// exponent form within double's range, the whole string and nothing else;
// false (and `out` untouched) for anything else.
inline bool ParseNumberText(const std::string& s, NumberText* out) {
  if (s == "inf" || s == "+inf" || s == "-inf" || s == "nan") {
    out->is_int = false;
    out->i = 0;
    out->d = s == "nan" ? std::numeric_limits<double>::quiet_NaN()
                        : (s[0] == '-' ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
    return true;
  }
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  const char* end = s.c_str() + s.size();
  char* stop = nullptr;
  errno = 0;
  const long long ll = std::strtoll(s.c_str(), &stop, 10);
  if (errno == 0 && stop == end) {
    *out = NumberText{true, static_cast<int64_t>(ll), static_cast<double>(ll)};
    return true;
  }
  errno = 0;
  const double d = std::strtod(s.c_str(), &stop);
  if (stop != end || errno == ERANGE) return false;
  *out = NumberText{false, 0, d};
  return true;
}

}  // namespace nabla::opkit
