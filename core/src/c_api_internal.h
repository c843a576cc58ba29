#pragma once
// Private to the core: the C ABI table (nabla/c_api.h) the plugin loader
// hands to C ABI plugins.
#include <cstdint>
#include <string>

#include "nabla/c_api.h"
#include "nabla/c_api_host.h"

namespace nabla {

// The table of this core; lives as long as the process.
const nabla_api* CoreCApi();

// The error a table function or a plugin callback left on this thread, and
// clears it; "" when there is none.
std::string TakeCApiError();

}  // namespace nabla
