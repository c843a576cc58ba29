#include "nabla/attribute.h"

#include <sstream>

namespace nabla {

const char* AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kString:
      return "string";
    case AttrType::kBool:
      return "bool";
    case AttrType::kInts:
      return "ints";
    case AttrType::kFloats:
      return "floats";
    case AttrType::kStrings:
      return "strings";
    case AttrType::kBools:
      return "bools";
    case AttrType::kBlock:
      return "block";
  }
  return "?";
}

namespace {
template <typename T>
void Put(std::ostringstream& os, const T& v) {
  os << v;
}
void Put(std::ostringstream& os, const std::string& v) { os << '"' << v << '"'; }
void Put(std::ostringstream& os, bool v) { os << (v ? "true" : "false"); }
template <typename T>
void Put(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    Put(os, static_cast<T>(v[i]));
  }
  os << ']';
}
void Put(std::ostringstream& os, const BlockRef& b) { os << "block " << b.idx; }
}  // namespace

std::string AttrToString(const Attribute& a) {
  std::ostringstream os;
  std::visit([&os](const auto& v) { Put(os, v); }, a);
  return os.str();
}

}  // namespace nabla
