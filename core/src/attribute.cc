#include "nabla/attribute.h"

#include <sstream>
#include <type_traits>

#include "nabla/attr_text.h"

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

std::string AttrToString(const Attribute& a) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, BlockRef>)
          os << "block " << v.idx;
        else
          attr_text::Put(os, v);
      },
      a);
  return os.str();
}

}  // namespace nabla
