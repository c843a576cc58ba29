#pragma once
// Writing a plugin: each op file registers next to its op with
// NABLA_REGISTER_OPS(name) { registrar.Op(...)...; registrar.Kernel(...); }
// and exactly one file of the plugin says NABLA_PLUGIN("my_plugin").
//
// Those blocks fill a list local to the plugin while it is being opened; the
// core then calls the plugin's single exported, versioned entry point with a
// staging Registrar, validates the batch, and publishes it atomically.
#include <string>
#include <vector>

#include "nabla/export.h"
#include "nabla/op_registry.h"

#define NABLA_ABI_VERSION 1

// The ABI tag is spelled into a symbol name so the loader can read it from
// the file's symbol table without running any of the library's code.
#define NABLA_PP_CAT2(a, b) a##b
#define NABLA_PP_CAT(a, b) NABLA_PP_CAT2(a, b)
#ifndef NABLA_PLUGIN_ABI_VERSION
#define NABLA_PLUGIN_ABI_VERSION NABLA_ABI_VERSION
#endif
#define NABLA_ABI_SYMBOL                                                                                        \
  NABLA_PP_CAT(NABLA_PP_CAT(NABLA_PP_CAT(NABLA_PP_CAT(nabla_abi_v, NABLA_PLUGIN_ABI_VERSION), _gcc), __GNUC__), \
               NABLA_PP_CAT(_cxx11abi, _GLIBCXX_USE_CXX11_ABI))

namespace nabla {

// The tag this core expects, e.g. "nabla_abi_v1_gcc12_cxx11abi1".
NABLA_API std::string ExpectedAbiTag();

namespace plugin_detail {
using RegisterFn = void (*)(Registrar&);
// Inline + hidden visibility (+ -fno-gnu-unique): one list per plugin.
inline std::vector<RegisterFn>& LocalRegistrations() {
  static std::vector<RegisterFn> list;
  return list;
}
struct AddRegistration {
  explicit AddRegistration(RegisterFn fn) { LocalRegistrations().push_back(fn); }
};
// Runs the plugin's registrations, turning any exception into an error
// message on the registrar (nothing may unwind across the entry point).
NABLA_API int RunRegistrations(Registrar* registrar, const std::vector<RegisterFn>& fns) noexcept;
}  // namespace plugin_detail

// Loads plugin files as transactions. Thread-safe.
class NABLA_API PluginManager {
 public:
  static PluginManager& Instance();
  // Loads one plugin. The same file twice is a no-op; a different file with
  // the same plugin name, a wrong ABI tag, a duplicate op, a throwing
  // registration... throw an Error naming the file (and the other side where
  // there is one), and leave the registry exactly as it was.
  void Load(const std::string& path);
  // The standard plugins (next to the binary: ../lib/nabla/plugins) and every
  // lib*.so in the folders of NABLA_PLUGIN_PATH. A file found there that does
  // not load (stale, broken, a clash) is skipped with one warning on stderr
  // naming it and why, so one bad file does not stop every command; with
  // `strict` it is an error, as a file asked for by name (Load) always is.
  // A folder of NABLA_PLUGIN_PATH that does not exist is an error.
  void LoadDefaults(bool strict = false);
  // The warnings of the files LoadDefaults skipped, in order.
  std::vector<std::string> Skipped() const;
  // Folder of the standard plugins.
  static std::string DefaultPluginDir();

 private:
  PluginManager() = default;
};

}  // namespace nabla

#define NABLA_REGISTER_OPS(unique_name)                                                      \
  static void nabla_register_ops_##unique_name(::nabla::Registrar& registrar);               \
  static const ::nabla::plugin_detail::AddRegistration nabla_add_registration_##unique_name( \
      &nabla_register_ops_##unique_name);                                                    \
  static void nabla_register_ops_##unique_name(::nabla::Registrar& registrar)

// The plugin's entry point and identity. Use once per plugin.
#define NABLA_PLUGIN(plugin_name)                                                                             \
  extern "C" NABLA_API int nabla_plugin_register_v1(::nabla::Registrar* registrar) noexcept {                 \
    return ::nabla::plugin_detail::RunRegistrations(registrar, ::nabla::plugin_detail::LocalRegistrations()); \
  }                                                                                                           \
  extern "C" NABLA_API const char* nabla_plugin_name() noexcept { return plugin_name; }                       \
  extern "C" NABLA_API const char NABLA_ABI_SYMBOL[] = plugin_name
