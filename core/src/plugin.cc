// The plugin loader: every plugin, standard or third-party, enters the
// registry through PluginManager::Load, one transaction per file.
#include "nabla/plugin.h"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

// Boost 1.74's library_info.hpp uses std::vector and std::string without
// including them; they must come first.
#include <boost/core/demangle.hpp>
#include <boost/dll/library_info.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "c_api_internal.h"
#include "device_plugins.h"
#include "nabla/plugin_version.h"
#include "registry_internal.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

constexpr char kTagPrefix[] = "nabla_abi_";
constexpr char kEntryPoint[] = "nabla_plugin_register_v1";
constexpr char kPathVariable[] = "NABLA_PLUGIN_PATH";
constexpr char kDeviceMarkerPrefix[] = "nabla_device_backend_";  // NABLA_DEVICE_PLUGIN

using EntryPoint = int(Registrar*);

struct LoadedPlugin {
  std::string name;
  std::string path;
  std::shared_ptr<void> library;
  std::string version;
};

// Loads are serialised; the list keeps every loaded library referenced.
struct ManagerState {
  std::mutex mutex;
  std::vector<LoadedPlugin> loaded;
  std::vector<std::string> skipped;  // warnings of LoadDefaults
  std::vector<std::string> tried;    // files LoadDefaults skipped: warned once
  // Device plugins: backend name -> file, noted without loading; the files
  // loaded so far and their libraries (kept, as op plugins' are).
  std::map<std::string, std::string> device_plugins;
  std::map<std::string, std::shared_ptr<void>> loaded_devices;
  bool devices_scanned = false;
};

// Serialises the look through the folders and device plugin loads. Held
// while a plugin's static initializers run, which register with the device
// registry; recursive in case one asks the registry for its names.
std::recursive_mutex& DeviceLoadMutex() {
  static std::recursive_mutex* mutex = new std::recursive_mutex;
  return *mutex;
}

// Deliberately leaked: plugins are never unloaded, not even at exit, because
// registry snapshots destroyed during static destruction still hold
// std::functions whose code lives in the plugins.
ManagerState& State() {
  static ManagerState* state = new ManagerState;
  return *state;
}

std::string Prefix(const std::string& path) { return StrCat("cannot load plugin '", path, "': "); }

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Reads [offset, offset + bytes) of `file`, refusing anything past its end.
void ReadAt(std::ifstream& file, uint64_t size, uint64_t offset, void* out, uint64_t bytes) {
  if (offset > size || bytes > size - offset) throw std::runtime_error("a table points past the end of the file");
  file.seekg(static_cast<std::streamoff>(offset));
  file.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  if (!file) throw std::runtime_error("read error");
}

// The exported names of .dynsym, which is what the dynamic loader reads and
// all that a stripped library keeps: Boost 1.74's library_info reads only
// .symtab, which `strip` removes.
std::vector<std::string> DynamicSymbols(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw std::runtime_error("cannot open the file");
  const uint64_t size = static_cast<uint64_t>(file.tellg());
  Elf64_Ehdr header;
  ReadAt(file, size, 0, &header, sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr)) return {};
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  ReadAt(file, size, header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr));
  std::vector<std::string> names;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_DYNSYM || section.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strings_section = sections[section.sh_link];
    std::vector<char> strings(strings_section.sh_size);
    ReadAt(file, size, strings_section.sh_offset, strings.data(), strings.size());
    std::vector<Elf64_Sym> symbols(section.sh_size / sizeof(Elf64_Sym));
    ReadAt(file, size, section.sh_offset, symbols.data(), symbols.size() * sizeof(Elf64_Sym));
    for (const Elf64_Sym& sym : symbols) {
      const unsigned bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
      if (ELF64_ST_VISIBILITY(sym.st_other) != STV_DEFAULT || sym.st_name >= strings.size()) continue;
      const char* name = strings.data() + sym.st_name;
      names.emplace_back(name, strnlen(name, strings.size() - sym.st_name));
    }
  }
  return names;
}

// Every exported symbol name of the file, read without running any of its
// code: the ABI tag of a C++ plugin, the manifest of a C ABI one.
std::vector<std::string> ReadSymbols(const std::string& path) {
  char magic[SELFMAG] = {};
  {
    std::ifstream file(path, std::ios::binary);
    file.read(magic, SELFMAG);
  }
  NABLA_ENFORCE(std::memcmp(magic, ELFMAG, SELFMAG) == 0, kInvalidArgument, Prefix(path),
                "not a nabla plugin: expected an ELF shared library but the file does not start with the ELF magic ",
                "bytes (", fs::file_size(path), " bytes of something else)");
  std::vector<std::string> symbols;
  try {
    symbols = boost::dll::library_info(path).symbols();
    std::vector<std::string> dynamic = DynamicSymbols(path);
    symbols.insert(symbols.end(), dynamic.begin(), dynamic.end());
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, Prefix(path), "not a nabla plugin: expected an ELF shared library but its ",
                "headers cannot be read (", e.what(), "); is it truncated or for another machine?");
  }
  return symbols;
}

// The tag is the name of an exported symbol, read from the file's symbol
// tables: nothing of the library runs before the tag has been accepted.
std::string ReadAbiTag(const std::string& path, const std::vector<std::string>& symbols) {
  std::vector<std::string> tags;
  for (const std::string& s : symbols) {
    if (StartsWith(s, kTagPrefix)) tags.push_back(s);
  }
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  NABLA_ENFORCE(!tags.empty(), kInvalidArgument, Prefix(path), "not a nabla plugin: expected an exported ",
                NABLA_C_MANIFEST_SYMBOL, " (C ABI, written by NABLA_PLUGIN or NABLA_C_PLUGIN) or ", kTagPrefix,
                "* ABI tag symbol (C++ ABI) but the library exports neither");
  NABLA_ENFORCE(tags.size() == 1, kInvalidArgument, Prefix(path), "not a nabla plugin: expected one ABI tag but ",
                "received ", tags.size(), " (", tags.front(), ", ", tags.back(), ")");
  return tags.front();
}

// dlopen's text, without Boost's wrapping and the repeated path, with the
// C++ name of an undefined symbol and a hint.
std::string DescribeLoadFailure(const std::string& path, const std::string& what) {
  std::string text = what;
  const std::string open = "dlerror system message: ";
  const size_t begin = text.find(open);
  const size_t end = text.rfind(')');
  if (begin != std::string::npos && end != std::string::npos && end > begin) {
    text = text.substr(begin + open.size(), end - begin - open.size());
  }
  if (text.rfind(path + ": ", 0) == 0) text.erase(0, path.size() + 2);
  const std::string undefined = "undefined symbol: ";
  const size_t at = text.find(undefined);
  if (at != std::string::npos) {
    const std::string mangled = text.substr(at + undefined.size());
    const std::string name = boost::core::demangle(mangled.c_str());
    if (name != mangled) text += " (" + name + ")";
    // The other side: the core this process loaded, which lacks the symbol.
    std::error_code ec;
    const std::string core = boost::dll::this_line_location(ec).string();
    text += StrCat("; the plugin was built against another nabla (this core is ", ec ? "libnabla_core.so" : core,
                   ", ABI tag ", ExpectedAbiTag(),
                   ") or a library it needs is not loaded: rebuild it against this "
                   "nabla");
  }
  return text;
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

// The backends a device plugin declares (NABLA_DEVICE_PLUGIN); none for an
// op plugin.
std::vector<std::string> DeviceBackendsOf(const std::vector<std::string>& symbols) {
  std::set<std::string> names;
  for (const std::string& s : symbols) {
    if (StartsWith(s, kDeviceMarkerPrefix) && s.size() > sizeof(kDeviceMarkerPrefix) - 1)
      names.insert(s.substr(sizeof(kDeviceMarkerPrefix) - 1));
  }
  return {names.begin(), names.end()};
}

// Notes device plugin `path` (state.mutex held): its ABI tag must be this
// core's, since it links the core's C++ classes. `replace`: a file named to
// Load or found by LoadDefaults takes a name over; the on-demand look
// through the folders only fills in names not yet known.
void NoteDevicePlugin(ManagerState& state, const std::string& path, const std::vector<std::string>& symbols,
                      const std::vector<std::string>& backends, bool replace);

std::vector<std::string> SearchFolders() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv(kPathVariable)) {
    const std::string value = env;
    size_t begin = 0;
    while (begin <= value.size()) {
      size_t end = value.find(':', begin);
      if (end == std::string::npos) end = value.size();
      if (end > begin) dirs.push_back(value.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  return dirs;
}

// Looks once (DeviceLoadMutex held) through NABLA_PLUGIN_PATH's folders,
// then the standard device folder, for device plugins, reading symbol
// tables only. A file there that cannot be read is left to LoadDefaults
// (NABLA_PLUGIN_PATH) or warned about once (the device folder).
void ScanDevicePlugins() {
  ManagerState& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.devices_scanned) return;
    state.devices_scanned = true;
  }
  std::vector<std::pair<std::string, bool>> dirs;  // folder, is the standard one
  for (const std::string& d : SearchFolders()) dirs.emplace_back(d, false);
  dirs.emplace_back(internal::DefaultDevicePluginDir(), true);
  for (const auto& [dir, standard] : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<std::string> files;
    try {
      files = PluginFilesIn(dir);
    } catch (const std::exception&) {
      continue;
    }
    for (const std::string& file : files) {
      try {
        const std::vector<std::string> symbols = ReadSymbols(file);
        const std::vector<std::string> backends = DeviceBackendsOf(symbols);
        if (backends.empty()) continue;
        std::lock_guard<std::mutex> lock(state.mutex);
        NoteDevicePlugin(state, file, symbols, backends, false);
      } catch (const std::exception& e) {
        if (standard) std::cerr << "nabla: warning: skipped " << e.what() << " (found in the device plugin folder)\n";
      }
    }
  }
}

}  // namespace

std::string ExpectedAbiTag() {
  // Spelled from the same pieces as NABLA_ABI_SYMBOL, but from the core's own
  // ABI version: a plugin's NABLA_PLUGIN_ABI_VERSION override must not leak in.
  return StrCat(kTagPrefix, "v", NABLA_ABI_VERSION, "_gcc", __GNUC__, "_cxx11abi", _GLIBCXX_USE_CXX11_ABI);
}

namespace {
void NoteDevicePlugin(ManagerState& state, const std::string& path, const std::vector<std::string>& symbols,
                      const std::vector<std::string>& backends, bool replace) {
  const std::string tag = ReadAbiTag(path, symbols);
  NABLA_ENFORCE(tag == ExpectedAbiTag(), kPreconditionNotMet, Prefix(path), "device plugin for '", backends.front(),
                "': ABI tag mismatch: expected ", ExpectedAbiTag(), " but received ", tag,
                "; rebuild it against this nabla");
  for (const std::string& b : backends) {
    if (replace) {
      state.device_plugins[b] = path;
    } else {
      state.device_plugins.emplace(b, path);
    }
  }
}
}  // namespace

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

  const std::vector<std::string> symbols = ReadSymbols(path);
  // A device plugin is noted, not loaded: the device registry loads it when
  // its device is first asked for, so a CPU run never maps it.
  const std::vector<std::string> device_backends = DeviceBackendsOf(symbols);
  if (!device_backends.empty()) {
    NoteDevicePlugin(state, path, symbols, device_backends, true);
    return;
  }
  const bool c_abi = std::find(symbols.begin(), symbols.end(), NABLA_C_MANIFEST_SYMBOL) != symbols.end();
  std::string tag;
  if (!c_abi) {
    tag = ReadAbiTag(path, symbols);
    const std::string expected = ExpectedAbiTag();
    NABLA_ENFORCE(tag == expected, kPreconditionNotMet, Prefix(path), "ABI tag mismatch: expected ", expected,
                  " but received ", tag, "; rebuild the plugin against this nabla (find_package(nabla) and ",
                  "nabla_add_plugin)");
  }

  // Destroyed after `staging` (declared later): staged std::functions hold
  // code from the library, which must stay mapped until they are gone.
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    library->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, Prefix(path), "the dynamic loader refused it: ", DescribeLoadFailure(path, e.what()));
  }

  std::string name;
  const nabla_plugin_manifest* manifest = nullptr;
  if (c_abi) {
    manifest = &library->get<const nabla_plugin_manifest>(NABLA_C_MANIFEST_SYMBOL);
    NABLA_ENFORCE(manifest->magic == NABLA_C_PLUGIN_MAGIC && manifest->name && *manifest->name, kInvalidArgument,
                  Prefix(path), "not a nabla plugin: expected a C ABI manifest (NABLA_C_PLUGIN_MAGIC and a name) in ",
                  NABLA_C_MANIFEST_SYMBOL, " but received magic 0x", std::hex, manifest->magic, std::dec,
                  manifest->name ? "" : " and no name");
    name = manifest->name;
    const std::string plugin = StrCat("plugin '", name, "' ", manifest->version ? manifest->version : "");
    // A plugin may only call the slots of the table it was built with: a
    // core older than that cannot serve it.
    NABLA_ENFORCE(manifest->api_version <= NABLA_C_API_VERSION, kPreconditionNotMet, Prefix(path), plugin,
                  " was built for the nabla C API version ", manifest->api_version, " but this core provides version ",
                  NABLA_C_API_VERSION, "; use a newer nabla or rebuild the plugin against this one");
    NABLA_ENFORCE(manifest->api_struct_size <= sizeof(nabla_api), kPreconditionNotMet, Prefix(path), plugin,
                  " (C API version ", manifest->api_version, ") needs a function table of ", manifest->api_struct_size,
                  " bytes but this core's table (C API version ", NABLA_C_API_VERSION, ") has ", sizeof(nabla_api),
                  "; the table is too short for it: rebuild the plugin against this nabla");
    NABLA_ENFORCE(library->has(NABLA_C_INIT_SYMBOL), kInvalidArgument, Prefix(path), plugin, " (C API version ",
                  manifest->api_version, ", core version ", NABLA_C_API_VERSION, ") exports ", NABLA_C_MANIFEST_SYMBOL,
                  " but not its entry point ", NABLA_C_INIT_SYMBOL, " (written by NABLA_C_PLUGIN or NABLA_PLUGIN)");
    tag = StrCat("nabla_c_api_v", manifest->api_version);
  } else {
    NABLA_ENFORCE(library->has(kEntryPoint), kInvalidArgument, Prefix(path), "not a nabla plugin: expected the entry ",
                  "point ", kEntryPoint, " (written by NABLA_PLUGIN) but the library does not export it");
    // The tag symbol's value is the plugin name (a plain char array: reading
    // it runs nothing).
    name = &library->get<const char>(tag);
  }

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
  if (c_abi) {
    auto* init = &library->get<int32_t(const nabla_api*, nabla_registrar*)>(NABLA_C_INIT_SYMBOL);
    TakeCApiError();
    if (init(CoreCApi(), reinterpret_cast<nabla_registrar*>(&staging)) != NABLA_C_OK) {
      const std::string error = TakeCApiError();
      NABLA_THROW(kInvalidArgument, Prefix(path), "the registration of plugin '", name,
                  "' failed: ", error.empty() ? "no message" : error);
    }
  } else {
    auto* entry = &library->get<EntryPoint>(kEntryPoint);
    if (entry(&staging) != 0) {
      NABLA_THROW(kInvalidArgument, Prefix(path), "the registration of plugin '", name,
                  "' threw: ", impl.registration_error.empty() ? "no message" : impl.registration_error);
    }
  }
  try {
    CommitRegistrar(staging);
  } catch (const Error& e) {
    // The commit names the batch by its path already; say it once.
    std::string message = e.what();
    if (message.rfind(path + ": ", 0) == 0) message.erase(0, path.size() + 2);
    ThrowError(e.kind(), Prefix(path) + message);
  }
  // Plugins built before versions existed have no such symbol.
  std::string version;
  if (manifest != nullptr) {
    if (manifest->version != nullptr) version = manifest->version;
  } else if (library->has("nabla_plugin_version")) {
    const char* v = library->get<const char*()>("nabla_plugin_version")();
    if (v != nullptr) version = v;
  }
  state.loaded.push_back(LoadedPlugin{name, path, library, version});
}

void PluginManager::LoadDefaults(bool strict) {
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
    for (const std::string& file : PluginFilesIn(dir)) {
      if (strict) {
        Load(file);
        continue;
      }
      try {
        Load(file);
      } catch (const Error& e) {
        // Load's message starts "cannot load plugin '<file>': <why>".
        const std::string warning = StrCat("nabla: warning: skipped ", e.what(), " (found in ", source,
                                           "; --strict-plugins makes this an error)");
        ManagerState& state = State();
        std::lock_guard<std::mutex> lock(state.mutex);
        if (std::find(state.tried.begin(), state.tried.end(), file) != state.tried.end()) continue;
        state.tried.push_back(file);
        state.skipped.push_back(warning);
        std::cerr << warning << "\n";
      }
    }
  }
}

std::string PluginVersion(const std::string& plugin_name) {
  ManagerState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (const LoadedPlugin& p : state.loaded)
    if (p.name == plugin_name) return p.version;
  return "";
}

std::vector<std::string> PluginManager::Skipped() const {
  ManagerState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.skipped;
}

namespace internal {

std::string DefaultDevicePluginDir() {
  const fs::path lib = boost::dll::this_line_location();
  return (lib.parent_path() / "nabla" / "devices").lexically_normal().string();
}

std::vector<std::string> DevicePluginBackends() {
  std::lock_guard<std::recursive_mutex> device_lock(DeviceLoadMutex());
  ScanDevicePlugins();
  ManagerState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<std::string> names;
  for (const auto& [name, path] : state.device_plugins) names.push_back(name);
  return names;
}

std::string LoadDevicePlugin(const std::string& name) {
  std::lock_guard<std::recursive_mutex> device_lock(DeviceLoadMutex());
  ScanDevicePlugins();
  ManagerState& state = State();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.device_plugins.find(name);
    if (it == state.device_plugins.end()) return "";
    path = it->second;
    if (state.loaded_devices.count(path)) return path;
  }
  // Its static initializers register the backend (RegisterDeviceBackend).
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    library->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, "cannot load device plugin '", path, "' for device '", name,
                "': the dynamic loader refused it: ", DescribeLoadFailure(path, e.what()));
  }
  std::lock_guard<std::mutex> lock(state.mutex);
  state.loaded_devices[path] = library;
  return path;
}

}  // namespace internal

std::string PluginManager::DefaultPluginDir() {
  // Plugins are in <prefix>/lib/nabla/plugins beside this library
  // (<prefix>/lib), in the build tree and in an install alike. Found from the
  // library rather than the executable so that every host finds them: the
  // nabla binary, tests, and the Python module under /usr/bin/python3.
  const fs::path lib = boost::dll::this_line_location();
  return (lib.parent_path() / "nabla" / "plugins").lexically_normal().string();
}

}  // namespace nabla
