#pragma once
// nabla/opkit/attr_tensor.h for plugins on the C ABI (see ../plugin.h): the
// op kit's tensor-valued attribute helpers (IntListAttrOrTensor,
// FloatAttrOrTensor, CreatedShape, ...), the same code as nabla's tree
// compiles, over the SDK's contexts.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
namespace opkit {

#include "nabla/sdk/attr_tensor.inc"  // IWYU pragma: export

}  // namespace opkit
}  // namespace c_sdk
}  // namespace nabla
