#pragma once
// Typed op attributes. The variant's alternative order is AttrType's order, so
// Attribute::index() is the AttrType.
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "nabla/export.h"

namespace nabla {

// An attribute naming a sub-block of the program by index (`sub_block: 1`).
struct BlockRef {
  int idx = -1;
  bool operator==(const BlockRef& o) const { return idx == o.idx; }
};

enum class AttrType { kInt, kFloat, kString, kBool, kInts, kFloats, kStrings, kBools, kBlock };

using Attribute = std::variant<int, float, std::string, bool, std::vector<int>, std::vector<float>,
                               std::vector<std::string>, std::vector<bool>, BlockRef>;
using AttributeMap = std::map<std::string, Attribute>;

inline AttrType TypeOf(const Attribute& a) { return static_cast<AttrType>(a.index()); }
NABLA_API const char* AttrTypeName(AttrType type);  // "int", "float", ..., "block"
NABLA_API std::string AttrToString(const Attribute& a);

template <typename T>
struct AttrTypeOf;
template <>
struct AttrTypeOf<int> {
  static constexpr AttrType value = AttrType::kInt;
};
template <>
struct AttrTypeOf<float> {
  static constexpr AttrType value = AttrType::kFloat;
};
template <>
struct AttrTypeOf<std::string> {
  static constexpr AttrType value = AttrType::kString;
};
template <>
struct AttrTypeOf<bool> {
  static constexpr AttrType value = AttrType::kBool;
};
template <>
struct AttrTypeOf<std::vector<int>> {
  static constexpr AttrType value = AttrType::kInts;
};
template <>
struct AttrTypeOf<std::vector<float>> {
  static constexpr AttrType value = AttrType::kFloats;
};
template <>
struct AttrTypeOf<std::vector<std::string>> {
  static constexpr AttrType value = AttrType::kStrings;
};
template <>
struct AttrTypeOf<std::vector<bool>> {
  static constexpr AttrType value = AttrType::kBools;
};
template <>
struct AttrTypeOf<BlockRef> {
  static constexpr AttrType value = AttrType::kBlock;
};

}  // namespace nabla
