// The plugin loader: every plugin, standard or third-party, enters the
// registry through PluginManager::Load, one transaction per file.
#include "nabla/plugin.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

// Boost 1.74's library_info.hpp uses std::vector and std::string without
// including them; they must come first.
#include <boost/dll/library_info.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "registry_internal.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

constexpr char kTagPrefix[] = "nabla_abi_";
constexpr char kEntryPoint[] = "nabla_plugin_register_v1";
constexpr char kPathVariable[] = "NABLA_PLUGIN_PATH";

using EntryPoint = int(Registrar*);

struct LoadedPlugin {
  std::string name;
  std::string path;
  std::shared_ptr<void> library;
};

// Loads are serialised; the list keeps every loaded library referenced.
struct ManagerState {
  std::mutex mutex;
  std::vector<LoadedPlugin> loaded;
};

// Deliberately leaked: plugins are never unloaded, not even at exit, because
// registry snapshots destroyed during static destruction still hold
// std::functions whose code lives in the plugins.
ManagerState& State() {
  static ManagerState* state = new ManagerState;
  return *state;
}

std::string Prefix(const std::string& path) { return StrCat("cannot load plugin '", path, "': "); }

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The tag is the name of an exported symbol, read from the file's symbol
// table: nothing of the library runs before the tag has been accepted.
std::string ReadAbiTag(const std::string& path) {
  std::vector<std::string> symbols;
  try {
    boost::dll::library_info info(path);
    symbols = info.symbols();
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, Prefix(path), "not a nabla plugin: expected an ELF shared library but the file ",
                "cannot be read as one (", e.what(), ")");
  }
  std::vector<std::string> tags;
  for (const std::string& s : symbols) {
    if (StartsWith(s, kTagPrefix)) tags.push_back(s);
  }
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  NABLA_ENFORCE(!tags.empty(), kInvalidArgument, Prefix(path), "not a nabla plugin: expected an exported ", kTagPrefix,
                "* ABI tag symbol (written by NABLA_PLUGIN(\"name\")) but the symbol table has none",
                " (a stripped library keeps no symbol table to read it from)");
  NABLA_ENFORCE(tags.size() == 1, kInvalidArgument, Prefix(path), "not a nabla plugin: expected one ABI tag but ",
                "received ", tags.size(), " (", tags.front(), ", ", tags.back(), ")");
  return tags.front();
}

std::vector<std::string> PluginFilesIn(const fs::path& dir) {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !StartsWith(name, "lib")) continue;
    if (name.size() < 6 || name.compare(name.size() - 3, 3, ".so") != 0) continue;
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string ExpectedAbiTag() {
  // Spelled from the same pieces as NABLA_ABI_SYMBOL, but from the core's own
  // ABI version: a plugin's NABLA_PLUGIN_ABI_VERSION override must not leak in.
  return StrCat(kTagPrefix, "v", NABLA_ABI_VERSION, "_gcc", __GNUC__, "_cxx11abi", _GLIBCXX_USE_CXX11_ABI);
}

PluginManager& PluginManager::Instance() {
  static PluginManager manager;
  return manager;
}

void PluginManager::Load(const std::string& requested_path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(requested_path, ec);
  NABLA_ENFORCE(!ec && fs::exists(absolute, ec), kNotFound, Prefix(requested_path),
                "expected an existing plugin file but there is none at that path");
  const std::string path = fs::canonical(absolute, ec).string();
  NABLA_ENFORCE(!ec, kNotFound, Prefix(requested_path), "cannot resolve the path (", ec.message(), ")");
  NABLA_ENFORCE(fs::is_regular_file(path, ec), kInvalidArgument, Prefix(path),
                "not a nabla plugin: expected a shared library file but received a ",
                fs::is_directory(path, ec) ? "directory" : "special file");

  ManagerState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (const LoadedPlugin& p : state.loaded) {
    if (p.path == path) return;  // the same file again: already in the registry
  }

  const std::string tag = ReadAbiTag(path);
  const std::string expected = ExpectedAbiTag();
  NABLA_ENFORCE(tag == expected, kPreconditionNotMet, Prefix(path), "ABI tag mismatch: expected ", expected,
                " but received ", tag, "; rebuild the plugin against this nabla (find_package(nabla) and ",
                "nabla_add_plugin)");

  // Destroyed after `staging` (declared later): staged std::functions hold
  // code from the library, which must stay mapped until they are gone.
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    library->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, Prefix(path), "the dynamic loader refused it: ", e.what(),
                " (a symbol this nabla does not export: rebuild the plugin against it)");
  }
  NABLA_ENFORCE(library->has(kEntryPoint), kInvalidArgument, Prefix(path), "not a nabla plugin: expected the entry ",
                "point ", kEntryPoint, " (written by NABLA_PLUGIN) but the library does not export it");
  // The tag symbol's value is the plugin name (a plain char array: reading
  // it runs nothing).
  const std::string name = &library->get<const char>(tag);

  for (const LoadedPlugin& p : state.loaded) {
    NABLA_ENFORCE(p.name != name, kAlreadyExists, Prefix(path), "a plugin named '", name, "' is already loaded from '",
                  p.path, "'; expected one file per plugin name but received a second one");
  }
  for (const OpRegistry::PluginRecord& p : CurrentRegistry()->Plugins()) {
    NABLA_ENFORCE(p.name != name, kAlreadyExists, Prefix(path), "the plugin name '", name,
                  "' is already taken by ops registered from '", p.path.empty() ? "in-process code" : p.path, "'");
  }

  Registrar staging;
  Registrar::Impl& impl = staging.GetImpl();
  impl.plugin_name = name;
  impl.plugin_path = path;
  impl.abi = tag;
  impl.library = library;
  auto* entry = &library->get<EntryPoint>(kEntryPoint);
  if (entry(&staging) != 0) {
    NABLA_THROW(kInvalidArgument, Prefix(path), "the registration of plugin '", name,
                "' threw: ", impl.registration_error.empty() ? "no message" : impl.registration_error);
  }
  try {
    CommitRegistrar(staging);
  } catch (const Error& e) {
    ThrowError(e.kind(), Prefix(path) + e.what());
  }
  state.loaded.push_back(LoadedPlugin{name, path, library});
}

void PluginManager::LoadDefaults() {
  std::vector<std::pair<fs::path, std::string>> dirs;  // folder, where it came from
  dirs.emplace_back(DefaultPluginDir(), "the standard plugin folder");
  if (const char* env = std::getenv(kPathVariable)) {
    const std::string value = env;
    size_t begin = 0;
    while (begin <= value.size()) {
      size_t end = value.find(':', begin);
      if (end == std::string::npos) end = value.size();
      if (end > begin) dirs.emplace_back(value.substr(begin, end - begin), StrCat(kPathVariable, "=", value));
      begin = end + 1;
    }
  }
  for (const auto& [dir, source] : dirs) {
    std::error_code ec;
    NABLA_ENFORCE(fs::is_directory(dir, ec), kNotFound, "cannot load plugins from '", dir.string(),
                  "': expected a folder but there is none (from ", source, ")");
    for (const std::string& file : PluginFilesIn(dir)) Load(file);
  }
}

std::string PluginManager::DefaultPluginDir() {
  // Binaries are in <prefix>/bin and plugins in <prefix>/lib/nabla/plugins,
  // in the build tree and in an install alike.
  const fs::path exe = boost::dll::program_location();
  return (exe.parent_path().parent_path() / "lib" / "nabla" / "plugins").lexically_normal().string();
}

}  // namespace nabla
