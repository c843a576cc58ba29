#pragma once
// How an attribute value is written in messages (AttrToString), in one place
// for the core (nabla/attribute.h) and the C ABI SDK (nabla/sdk/plugin.h),
// which cannot include each other: an op's error names a value in the same
// words whichever build the op file is compiled in. Strings are quoted,
// bools are true/false, lists are [a, b].
#include <ostream>
#include <string>
#include <vector>

namespace nabla::attr_text {

template <typename T>
void Put(std::ostream& os, const T& v) {
  os << v;
}
inline void Put(std::ostream& os, const std::string& v) { os << '"' << v << '"'; }
inline void Put(std::ostream& os, bool v) { os << (v ? "true" : "false"); }
template <typename T>
void Put(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    Put(os, static_cast<T>(v[i]));
  }
  os << ']';
}

}  // namespace nabla::attr_text
