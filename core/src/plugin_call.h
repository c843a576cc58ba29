#pragma once
// Private: the boundary where the core calls plugin code (shape inference,
// kernels, grad makers). A nabla::Error passes unchanged (the plugin's own
// message); anything else a plugin throws, a std::exception or not, becomes
// one Error naming the plugin and the phase, which the caller prefixes with
// the op and its program position.
#include <exception>
#include <new>
#include <string>

#include "nabla/error.h"
#include "nabla/op_registry.h"

namespace nabla::internal {

inline std::string PluginLabel(const Origin& origin) {
  return origin.plugin.empty() ? std::string("in-process code") : StrCat("plugin '", origin.plugin, "'");
}

// `where` (may be empty) starts the message: callers that do not prefix
// errors with the op themselves pass "prog.yaml:3:7: op 'mul': ".
template <typename F>
decltype(auto) CallPlugin(const Origin& origin, const char* phase, F&& f, const std::string& where = "") {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, StrCat(where, PluginLabel(origin), " threw from ", phase, ": ", e.what()));
  } catch (...) {
    throw Error(ErrorKind::kRuntime,
                StrCat(where, PluginLabel(origin), " threw a non-standard exception (not derived from ",
                       "std::exception) from ", phase));
  }
}

}  // namespace nabla::internal
