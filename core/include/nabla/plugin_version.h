#pragma once
// The version a loaded plugin declares. nabla_add_plugin compiles into each
// plugin an exported `const char* nabla_plugin_version()` returning its
// VERSION (default: the project's); programs and checkpoints record it next
// to the plugin's name (docs/program-format.md, `plugins:`).
#include <string>

#include "nabla/export.h"

namespace nabla {

// "" for a plugin not loaded, or built without a version.
NABLA_API std::string PluginVersion(const std::string& plugin_name);

}  // namespace nabla
