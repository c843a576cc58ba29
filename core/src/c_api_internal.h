#pragma once
// Private to the core: the C ABI table (nabla/c_api.h) the plugin loader
// hands to C ABI plugins, and what its two halves share: c_api.cc (ops,
// tensors, errors) and c_api_device.cc (device plugins).
#include <cstdint>
#include <exception>
#include <string>

#include "nabla/c_api.h"
#include "nabla/c_api_host.h"
#include "nabla/error.h"

namespace nabla {

// The table of this core; lives as long as the process.
const nabla_api* CoreCApi();

// The error a table function or a plugin callback left on this thread, and
// clears it; "" when there is none.
std::string TakeCApiError();

namespace c_api_detail {

// A string the plugin passed; NULL is "".
inline std::string Str(const char* s) { return s ? std::string(s) : std::string(); }

// Records the calling thread's error (what last_error returns).
void SetError(int32_t kind, const std::string& message);

// Runs `f`, turning anything it throws into the thread's error and `fail`:
// nothing may unwind into plugin code.
template <typename R, typename F>
R Guard(R fail, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    SetError(static_cast<int32_t>(e.kind()), e.what());
  } catch (const std::exception& e) {
    SetError(NABLA_C_RUNTIME, e.what());
  } catch (...) {
    SetError(NABLA_C_RUNTIME, "an exception that is not a std::exception");
  }
  return fail;
}

template <typename F>
int32_t GuardStatus(F&& f) noexcept {
  return Guard<int32_t>(NABLA_C_ERROR, [&] {
    f();
    return NABLA_C_OK;
  });
}

// Around every call into plugin code: a fresh error slot, and scratch (the
// strings the table hands out) that outlives the call.
struct ThreadState;
class CallbackScope {
 public:
  CallbackScope();
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  ThreadState* state_;  // the thread's, looked up once
  bool nested_ = false;
  size_t marks_[4] = {};  // the scratch's sizes when a nested callback began
};

// After a callback returned NABLA_C_ERROR: the error it left, as an Error.
[[noreturn]] void RaisePluginError(const char* what);

// Fills the device plugins' slots of the table (c_api_device.cc).
void FillDeviceTable(nabla_api* api);

}  // namespace c_api_detail
}  // namespace nabla
