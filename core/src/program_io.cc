// Program files (docs/program-format.md) in YAML, read and written with yaml-cpp, which
// stays private to this file. Reading types every attribute by the op's
// registered schema and reports every problem as "FILE:LINE:COL: ...".
#include "nabla/program_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nabla/op_registry.h"
#include "nabla/plugin_version.h"
#include "source_pos.h"

namespace nabla {
namespace {

constexpr const char* kFormatName = "nabla-program";
constexpr const char* kFormatVersion = "nabla-program/1";

// yaml-cpp marks are 0-based; a missing key has a null mark (line -1).
SourcePos ToPos(const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return n.size() == 0 ? "an empty list" : "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "null";
    default:
      return "nothing";
  }
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

// One key of a YAML map, with the nodes kept for their marks.
struct Field {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// For an op type no loaded plugin registers: what the file's `plugins:`
// says to load, or "".
std::string MissingPluginHint(const std::vector<PluginRequirement>& plugins, const std::string& type) {
  for (const PluginRequirement& p : plugins)
    for (const std::string& op : p.ops)
      if (op == type)
        return StrCat("; the program names plugin '", p.name, "'", p.version.empty() ? "" : " version " + p.version,
                      " for it: load it with --plugin FILE (or a folder of NABLA_PLUGIN_PATH)");
  return "";
}

class Parser {
 public:
  Parser(std::string source, const OpRegistry& registry) : source_(std::move(source)), registry_(registry) {}

  ProgramDesc Parse(const YAML::Node& root) {
    ProgramDesc program;
    program.SetSourceFile(source_);
    if (!root.IsMap()) {
      Fail(ErrorKind::kInvalidArgument, root.Mark(),
           "not a program file: expected a map with 'format' and 'blocks' but received ", Describe(root));
    }
    std::vector<Field> top = Fields(root, {"format", "plugins", "blocks", "backward"}, "program file");
    const Field* format = Find(top, "format");
    if (!format) {
      Fail(ErrorKind::kInvalidArgument, root.Mark(), "missing 'format': expected 'format: ", kFormatVersion,
           "' at the top of a program file but received no 'format' key");
    }
    std::string version = String(format->value, "format");
    if (version != kFormatVersion) {
      bool ours = version.rfind(std::string(kFormatName) + "/", 0) == 0;
      Fail(ErrorKind::kInvalidArgument, format->value.Mark(),
           ours ? "unsupported format version" : "not a program file", ": expected '", kFormatVersion,
           "' but received '", version, "'");
    }
    const Field* blocks = Find(top, "blocks");
    if (!blocks)
      Fail(ErrorKind::kInvalidArgument, root.Mark(), "missing 'blocks': expected a list of blocks but received none");
    if (!blocks->value.IsSequence() || blocks->value.size() == 0) {
      Fail(ErrorKind::kInvalidArgument, blocks->value.Mark(),
           "bad 'blocks': expected a non-empty list of blocks (block 0 is the root) but received ",
           Describe(blocks->value));
    }
    // Before the ops: an op type no loaded plugin registers is reported with
    // the plugin the file names for it.
    if (const Field* plugins = Find(top, "plugins")) plugins_ = ParsePlugins(plugins->value);
    for (size_t b = 0; b < blocks->value.size(); ++b) ParseBlock(blocks->value[b], b, program);
    if (const Field* backward = Find(top, "backward")) program.SetBackward(ParseBackward(backward->value));
    return program;
  }

  template <typename... Args>
  [[noreturn]] void Fail(ErrorKind kind, const YAML::Mark& mark, const Args&... args) const {
    SourcePos pos = ToPos(mark);
    if (pos.line == 0) pos = {1, 1};
    ThrowError(kind, StrCat(source_, ":", pos.line, ":", pos.col, ": ", args...));
  }

 private:
  // The keys of a map, each checked against `allowed` (empty: any) and for
  // duplicates, which yaml-cpp keeps silently (unless the caller reports
  // them itself: a duplicate var is kAlreadyExists).
  std::vector<Field> Fields(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& what,
                            bool keep_duplicates = false) {
    if (!map.IsMap())
      Fail(ErrorKind::kInvalidArgument, map.Mark(), "bad ", what, ": expected a map but received ", Describe(map));
    std::vector<Field> fields;
    std::set<std::string> seen;
    for (const auto& kv : map) {
      // Copies: yaml-cpp iterators hand out proxies that die with the statement.
      YAML::Node k = kv.first;
      if (!k.IsScalar())
        Fail(ErrorKind::kInvalidArgument, k.Mark(), "bad key in ", what, ": expected a name but received ",
             Describe(k));
      std::string key = k.Scalar();
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        Fail(ErrorKind::kInvalidArgument, k.Mark(), "unknown key in ", what, ": expected one of ", Join(allowed),
             " but received '", key, "'");
      }
      if (!seen.insert(key).second && !keep_duplicates) {
        Fail(ErrorKind::kInvalidArgument, k.Mark(), "duplicate key in ", what, ": expected '", key,
             "' once but received it again");
      }
      fields.push_back({key, k, kv.second});
    }
    return fields;
  }

  static const Field* Find(const std::vector<Field>& fields, const std::string& key) {
    for (const Field& f : fields)
      if (f.key == key) return &f;
    return nullptr;
  }

  std::string String(const YAML::Node& n, const std::string& what) {
    if (!n.IsScalar())
      Fail(ErrorKind::kInvalidArgument, n.Mark(), "bad ", what, ": expected a string but received ", Describe(n));
    return n.Scalar();
  }

  template <typename T>
  T Number(const YAML::Node& n, const std::string& what, const char* type_name) {
    T value{};
    if (!n.IsScalar() || !YAML::convert<T>::decode(n, value)) {
      Fail(ErrorKind::kInvalidArgument, n.Mark(), "bad ", what, ": expected ", type_name, " but received ",
           Describe(n));
    }
    return value;
  }

  int Int(const YAML::Node& n, const std::string& what) { return Number<int>(n, what, "an int"); }
  int64_t Int64(const YAML::Node& n, const std::string& what) { return Number<int64_t>(n, what, "an int"); }
  bool Bool(const YAML::Node& n, const std::string& what) { return Number<bool>(n, what, "true or false"); }
  float Float(const YAML::Node& n, const std::string& what) {
    // yaml-cpp reads "1e40" as inf through its stream; a float attr that
    // overflows is a typo, not infinity (".inf" stays allowed).
    float f = Number<float>(n, what, "a float");
    if (std::isinf(f) && n.Scalar().find("inf") == std::string::npos && n.Scalar().find("Inf") == std::string::npos &&
        n.Scalar().find("INF") == std::string::npos) {
      Fail(ErrorKind::kOutOfRange, n.Mark(), "bad ", what, ": expected a float in range but received ", Describe(n));
    }
    return f;
  }

  template <typename T, typename ReadOne>
  std::vector<T> List(const YAML::Node& n, const std::string& what, const char* type_name, ReadOne read_one) {
    if (!n.IsSequence()) {
      Fail(ErrorKind::kInvalidArgument, n.Mark(), "bad ", what, ": expected a list of ", type_name, " but received ",
           Describe(n));
    }
    std::vector<T> out;
    for (size_t i = 0; i < n.size(); ++i) out.push_back(read_one(n[i], "element " + std::to_string(i) + " of " + what));
    return out;
  }

  std::vector<std::string> Names(const YAML::Node& n, const std::string& what) {
    return List<std::string>(n, what, "var names", [&](const YAML::Node& e, const std::string& w) {
      if (!e.IsScalar() || e.Scalar().empty()) {
        Fail(ErrorKind::kInvalidArgument, e.Mark(), "bad ", w, ": expected a var name but received ", Describe(e));
      }
      return e.Scalar();
    });
  }

  Attribute ParseAttr(const AttrDef& def, const YAML::Node& n, const std::string& what) {
    using Node = YAML::Node;
    using Str = std::string;
    switch (def.type) {
      case AttrType::kInt:
        return Int(n, what);
      case AttrType::kFloat:
        return Float(n, what);
      case AttrType::kString:
        return String(n, what);
      case AttrType::kBool:
        return Bool(n, what);
      case AttrType::kInts:
        return List<int>(n, what, "ints", [&](const Node& e, const Str& w) { return Int(e, w); });
      case AttrType::kFloats:
        return List<float>(n, what, "floats", [&](const Node& e, const Str& w) { return Float(e, w); });
      case AttrType::kStrings:
        return List<Str>(n, what, "strings", [&](const Node& e, const Str& w) { return String(e, w); });
      case AttrType::kBools:
        return List<bool>(n, what, "bools", [&](const Node& e, const Str& w) { return Bool(e, w); });
      case AttrType::kBlock:
        return BlockRef{Number<int>(n, what, "a block index (int)")};
    }
    Fail(ErrorKind::kInvalidArgument, n.Mark(), "bad ", what, ": the schema gives it no known type");
  }

  // Attributes of `type` from the fields of a map (an op's `attrs`, or an
  // `init` entry without its `type` key).
  AttributeMap ParseAttrs(const std::vector<Field>& fields, const OpSchema& schema, const std::string& owner) {
    AttributeMap attrs;
    for (const Field& f : fields) {
      const AttrDef* def = schema.FindAttr(f.key);
      if (!def) {
        std::vector<std::string> names;
        for (const AttrDef& a : schema.attrs) names.push_back(a.name);
        Fail(ErrorKind::kInvalidArgument, f.key_node.Mark(), "unknown attribute of ", owner, ": expected one of ",
             Join(names), " but received '", f.key, "'");
      }
      attrs[f.key] =
          ParseAttr(*def, f.value, "attribute '" + f.key + "' of " + owner + " (" + AttrTypeName(def->type) + ")");
    }
    return attrs;
  }

  const OpInfo& OpType(const YAML::Node& n, const std::string& what) {
    std::string type = String(n, what);
    const OpInfo* info = registry_.Find(type);
    if (!info) {
      Fail(ErrorKind::kNotFound, n.Mark(),
           "unknown op type: expected an op registered by a loaded plugin but received '", type, "'",
           MissingPluginHint(plugins_, type));
    }
    return *info;
  }

  void ParseBlock(const YAML::Node& node, size_t b, ProgramDesc& program) {
    const std::string what = "block #" + std::to_string(b);
    std::vector<Field> fields = Fields(node, {"idx", "parent", "vars", "ops"}, what);
    if (const Field* idx = Find(fields, "idx")) {
      int i = Int(idx->value, "'idx' of " + what);
      if (i != static_cast<int>(b)) {
        Fail(ErrorKind::kInvalidArgument, idx->value.Mark(), "bad block idx: blocks are listed in order, expected idx ",
             b, " but received ", i);
      }
    }
    const Field* parent_field = Find(fields, "parent");
    int parent = -1;
    if (parent_field) {
      parent = Int(parent_field->value, "'parent' of " + what);
    } else if (b != 0) {
      Fail(ErrorKind::kInvalidArgument, node.Mark(), "missing 'parent' of ", what, ": expected a block index in [0, ",
           b, ") but received none");
    }
    if (b == 0 && parent != -1) {
      Fail(ErrorKind::kInvalidArgument, parent_field->value.Mark(),
           "bad block parent: block 0 is the root, expected -1 but received ", parent);
    }
    if (b != 0 && (parent < 0 || parent >= static_cast<int>(b))) {
      Fail(ErrorKind::kInvalidArgument, parent_field->value.Mark(), "bad block parent of ", what,
           ": expected an earlier block in [0, ", b, ") but received ", parent);
    }
    BlockDesc* block = b == 0 ? program.Root() : program.AppendBlock(parent);
    if (const Field* vars = Find(fields, "vars")) {
      if (!vars->value.IsNull()) {
        for (const Field& v : Fields(vars->value, {}, "vars of " + what, true)) ParseVar(v, *block);
      }
    }
    if (const Field* ops = Find(fields, "ops")) {
      if (!ops->value.IsNull()) {
        if (!ops->value.IsSequence()) {
          Fail(ErrorKind::kInvalidArgument, ops->value.Mark(), "bad 'ops' of ", what,
               ": expected a list of ops but received ", Describe(ops->value));
        }
        for (size_t i = 0; i < ops->value.size(); ++i) ParseOp(ops->value[i], *block);
      }
    }
  }

  void ParseVar(const Field& f, BlockDesc& block) {
    const std::string& name = f.key;
    if (name.empty())
      Fail(ErrorKind::kInvalidArgument, f.key_node.Mark(), "bad var name: expected a name but received ''");
    if (block.HasVar(name)) {
      Fail(ErrorKind::kAlreadyExists, f.key_node.Mark(), "duplicate var '", name, "' in block ", block.Idx(),
           ": expected each var declared once but received it again");
    }
    VarDesc* var = block.Var(name);
    var->SetDeclared(true);
    var->SetPos(ToPos(f.key_node.Mark()));
    if (f.value.IsNull()) return;
    const std::string what = "var '" + name + "'";
    std::vector<Field> fields =
        Fields(f.value, {"shape", "dtype", "type", "persistable", "stop_gradient", "init"}, what);
    for (const Field& field : fields) {
      const std::string fwhat = "'" + field.key + "' of " + what;
      if (field.key == "shape") {
        Shape shape = List<int64_t>(field.value, fwhat, "ints", [&](const YAML::Node& e, const std::string& w) {
          int64_t d = Int64(e, w);
          if (d < -1)
            Fail(ErrorKind::kInvalidArgument, e.Mark(), "bad ", w,
                 ": expected a dim >= 0 or -1 (unknown) but received ", d);
          return d;
        });
        // Bounded here, where the file position is known, before anything
        // multiplies the dims.
        if (std::find(shape.begin(), shape.end(), 0) == shape.end()) {
          int64_t n = 1;
          for (int64_t d : shape) {
            if (d > 0 && __builtin_mul_overflow(n, d, &n)) {
              Fail(ErrorKind::kOutOfRange, field.value.Mark(), "bad ", fwhat, ": ", ShapeToString(shape),
                   " has more elements than a 64-bit count holds");
            }
          }
        }
        var->SetShape(std::move(shape));
      } else if (field.key == "dtype") {
        DType dtype;
        std::string s = String(field.value, fwhat);
        if (!ParseDType(s, &dtype)) {
          Fail(ErrorKind::kInvalidArgument, field.value.Mark(), "bad dtype of ", what,
               ": expected one of float32, float64, int32, int64, bool, bfloat16 but received '", s, "'");
        }
        var->SetDType(dtype);
        var->MarkDTypeKnown(true);
      } else if (field.key == "type") {
        VarType type;
        std::string s = String(field.value, fwhat);
        if (!ParseVarType(s, &type)) {
          Fail(ErrorKind::kInvalidArgument, field.value.Mark(), "bad type of ", what,
               ": expected one of dense, tensor_array, step_scopes but received '", s, "'");
        }
        var->SetType(type);
      } else if (field.key == "persistable") {
        var->SetPersistable(Bool(field.value, fwhat));
      } else if (field.key == "stop_gradient") {
        var->SetStopGradient(Bool(field.value, fwhat));
      } else if (field.key == "init") {
        var->SetInit(ParseInit(field.value, what));
      }
    }
    if (var->Init() && !var->Persistable()) {
      Fail(ErrorKind::kInvalidArgument, Find(fields, "init")->key_node.Mark(), "'init' of ", what,
           " initializes parameters: expected 'persistable: true' on the var but received a non-persistable var");
    }
  }

  InitSpec ParseInit(const YAML::Node& node, const std::string& owner) {
    const std::string what = "'init' of " + owner;
    std::vector<Field> fields = Fields(node, {}, what);
    const Field* type = Find(fields, "type");
    if (!type) {
      Fail(ErrorKind::kInvalidArgument, node.Mark(), "missing 'type' in ", what,
           ": expected an initializer op type such as uniform_random but received none");
    }
    InitSpec init;
    const OpInfo& info = OpType(type->value, "'type' of " + what);
    init.type = type->value.Scalar();
    init.pos = ToPos(node.Mark());
    std::vector<Field> attr_fields;
    for (const Field& f : fields)
      if (f.key != "type") attr_fields.push_back(f);
    init.attrs = ParseAttrs(attr_fields, info.schema, "initializer op '" + init.type + "' of " + owner);
    return init;
  }

  void ParseOp(const YAML::Node& node, BlockDesc& block) {
    const std::string what = "op #" + std::to_string(block.OpSize()) + " of block " + std::to_string(block.Idx());
    std::vector<Field> fields = Fields(node, {"type", "inputs", "outputs", "attrs"}, what);
    const Field* type = Find(fields, "type");
    if (!type) {
      Fail(ErrorKind::kInvalidArgument, node.Mark(), "missing 'type' of ", what,
           ": expected an op type such as 'mul' but received none");
    }
    const OpInfo& info = OpType(type->value, "'type' of " + what);
    auto op = std::make_unique<OpDesc>();
    op->SetType(type->value.Scalar());
    op->SetPos(ToPos(node.Mark()));
    const std::string owner = "op '" + op->Type() + "'";
    for (const char* key : {"inputs", "outputs"}) {
      const Field* slots = Find(fields, key);
      if (!slots || slots->value.IsNull()) continue;
      VarNameMap& map = std::string(key) == "inputs" ? op->MutableInputs() : op->MutableOutputs();
      for (const Field& s : Fields(slots->value, {}, std::string(key) + " of " + owner)) {
        map[s.key] = Names(s.value, "slot '" + s.key + "' of " + owner);
      }
    }
    if (const Field* attrs = Find(fields, "attrs")) {
      if (!attrs->value.IsNull())
        op->MutableAttrs() = ParseAttrs(Fields(attrs->value, {}, "attrs of " + owner), info.schema, owner);
    }
    block.AppendOp(std::move(op));
  }

  std::vector<PluginRequirement> ParsePlugins(const YAML::Node& node) {
    if (!node.IsSequence())
      Fail(ErrorKind::kInvalidArgument, node.Mark(),
           "bad 'plugins': expected a list of {name, version, ops} but received ", Describe(node));
    std::vector<PluginRequirement> out;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string what = "plugins[" + std::to_string(i) + "]";
      std::vector<Field> fields = Fields(node[i], {"name", "version", "ops"}, what);
      const Field* name = Find(fields, "name");
      if (!name)
        Fail(ErrorKind::kInvalidArgument, node[i].Mark(), "missing 'name' in ", what, ": expected the plugin name");
      PluginRequirement p;
      p.name = String(name->value, what + ".name");
      if (const Field* version = Find(fields, "version")) p.version = String(version->value, what + ".version");
      if (const Field* ops = Find(fields, "ops")) p.ops = Names(ops->value, what + ".ops");
      out.push_back(std::move(p));
    }
    return out;
  }

  BackwardInfo ParseBackward(const YAML::Node& node) {
    std::vector<Field> fields = Fields(node, {"loss", "param_grads"}, "'backward'");
    const Field* loss = Find(fields, "loss");
    if (!loss)
      Fail(ErrorKind::kInvalidArgument, node.Mark(),
           "missing 'loss' in 'backward': expected the loss var name but received none");
    BackwardInfo info;
    info.loss = String(loss->value, "'loss' of 'backward'");
    if (const Field* pg = Find(fields, "param_grads")) {
      if (!pg->value.IsSequence()) {
        Fail(ErrorKind::kInvalidArgument, pg->value.Mark(),
             "bad 'param_grads': expected a list of [param, grad] pairs but received ", Describe(pg->value));
      }
      for (size_t i = 0; i < pg->value.size(); ++i) {
        const YAML::Node& pair = pg->value[i];
        std::vector<std::string> names = Names(pair, "param_grads[" + std::to_string(i) + "]");
        if (names.size() != 2) {
          Fail(ErrorKind::kInvalidArgument, pair.Mark(), "bad param_grads[", i,
               "]: expected [param, grad] but received ", names.size(), " names");
        }
        info.param_grads.emplace_back(names[0], names[1]);
      }
    }
    return info;
  }

  std::string source_;
  const OpRegistry& registry_;
  std::vector<PluginRequirement> plugins_;  // the file's `plugins:`, read before its ops
};

// ------------------------------------------------------------------ writing

// Shortest decimal that reads back as the same float, so files stay readable
// ("0.05", not "0.0500000007") and the round trip stays exact.
std::string FloatToYaml(float f) {
  if (std::isnan(f)) return ".nan";
  if (std::isinf(f)) return f > 0 ? ".inf" : "-.inf";
  char buf[64];
  for (int precision = 6; precision <= std::numeric_limits<float>::max_digits10; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Strings that YAML reads as null are quoted so they stay strings; so are
// those other YAML readers take for a bool or a number (a var named "true", a
// string attr "1"), which keeps files unambiguous outside nabla too. Other
// quoting (a leading '@' as in "@EMPTY@", ": " inside) yaml-cpp does itself.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::unordered_set<std::string> kReserved = {
      "~",   "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "yes",
      "Yes", "YES",  "no",   "No",   "NO",   "on",   "On",   "ON",    "off",   "Off",   "OFF"};
  if (kReserved.count(s)) return true;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (end && *end == '\0') return true;
  return s == ".inf" || s == "-.inf" || s == "+.inf" || s == ".nan";
}

void EmitString(YAML::Emitter& out, const std::string& s) {
  if (NeedsQuotes(s)) {
    out << YAML::DoubleQuoted << s;
  } else {
    out << s;
  }
}

void EmitNames(YAML::Emitter& out, const std::vector<std::string>& names) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& n : names) EmitString(out, n);
  out << YAML::EndSeq;
}

void EmitAttr(YAML::Emitter& out, const Attribute& a) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int>) {
          out << v;
        } else if constexpr (std::is_same_v<T, float>) {
          out << FloatToYaml(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          EmitString(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out << v;
        } else if constexpr (std::is_same_v<T, BlockRef>) {
          out << v.idx;
        } else {
          out << YAML::Flow << YAML::BeginSeq;
          for (const auto& e : v) {
            using E = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<E, float>) {
              out << FloatToYaml(e);
            } else if constexpr (std::is_same_v<E, std::string>) {
              EmitString(out, e);
            } else if constexpr (std::is_same_v<E, bool>) {
              out << static_cast<bool>(e);
            } else {
              out << e;
            }
          }
          out << YAML::EndSeq;
        }
      },
      a);
}

void EmitAttrs(YAML::Emitter& out, const AttributeMap& attrs) {
  out << YAML::Flow << YAML::BeginMap;
  for (const auto& [name, value] : attrs) {
    out << YAML::Key << name << YAML::Value;
    EmitAttr(out, value);
  }
  out << YAML::EndMap;
}

void EmitVar(YAML::Emitter& out, const VarDesc& v) {
  out << YAML::Flow << YAML::BeginMap;
  if (!v.GetShape().empty()) {
    out << YAML::Key << "shape" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int64_t d : v.GetShape()) out << d;
    out << YAML::EndSeq;
  }
  if (v.HasDType()) out << YAML::Key << "dtype" << YAML::Value << DTypeName(v.GetDType());
  if (v.Type() != VarType::kDense) out << YAML::Key << "type" << YAML::Value << VarTypeName(v.Type());
  if (v.Persistable()) out << YAML::Key << "persistable" << YAML::Value << true;
  if (v.StopGradient()) out << YAML::Key << "stop_gradient" << YAML::Value << true;
  if (v.Init()) {
    out << YAML::Key << "init" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "type" << YAML::Value << v.Init()->type;
    for (const auto& [name, value] : v.Init()->attrs) {
      out << YAML::Key << name << YAML::Value;
      EmitAttr(out, value);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void EmitOp(YAML::Emitter& out, const OpDesc& op) {
  out << YAML::BeginMap;
  out << YAML::Key << "type" << YAML::Value << op.Type();
  for (const auto& [key, slots] : {std::pair<const char*, const VarNameMap*>{"inputs", &op.Inputs()},
                                   std::pair<const char*, const VarNameMap*>{"outputs", &op.Outputs()}}) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [slot, args] : *slots) {
      out << YAML::Key << slot << YAML::Value;
      EmitNames(out, args);
    }
    out << YAML::EndMap;
  }
  if (!op.Attrs().empty()) {
    out << YAML::Key << "attrs" << YAML::Value;
    EmitAttrs(out, op.Attrs());
  }
  out << YAML::EndMap;
}

bool SameVarInfo(const VarDesc& a, const VarDesc& b) {
  return a.GetShape() == b.GetShape() && a.HasDType() == b.HasDType() &&
         (!a.HasDType() || a.GetDType() == b.GetDType()) && a.Type() == b.Type() &&
         a.Persistable() == b.Persistable() && a.StopGradient() == b.StopGradient() &&
         a.Init().has_value() == b.Init().has_value();
}

void CopyVarInfo(const VarDesc& from, VarDesc* to) {
  to->SetShape(from.GetShape());
  to->SetDType(from.GetDType());
  to->MarkDTypeKnown(from.HasDType());
  to->SetType(from.Type());
  to->SetPersistable(from.Persistable());
  to->SetStopGradient(from.StopGradient());
}

// Which vars of each block the file lists. Declared vars always; a var a
// pass created is left out when reading the file back recreates it exactly.
// That is checked by doing what the reader does on a copy without those
// vars: inference op by op, in block order. A var whose producer does not
// reproduce it is kept and gets its real info back in the copy at once, so
// later shape functions see what they will see when the file is read (never
// a half-empty var they were not written for). Vars with several producers
// are kept: the reader could not tell which producer's result is meant.
std::vector<std::unordered_set<std::string>> VarsToWrite(const ProgramDesc& program) {
  std::vector<std::unordered_set<std::string>> keep(program.Size());
  std::vector<std::unordered_set<std::string>> all(program.Size());
  std::unordered_map<std::string, int> producers;
  for (size_t b = 0; b < program.Size(); ++b) {
    for (const auto& op : program.Block(b)->AllOps())
      for (const std::string& out : op->OutputArgumentNames()) ++producers[out];
  }
  for (size_t b = 0; b < program.Size(); ++b) {
    const BlockDesc* block = program.Block(b);
    std::unordered_set<std::string> produced_here;
    for (const auto& op : block->AllOps())
      for (const std::string& out : op->OutputArgumentNames()) produced_here.insert(out);
    for (const auto& v : block->AllVars()) {
      all[b].insert(v->Name());
      if (v->Declared() || v->Persistable() || v->StopGradient() || v->Init() || !produced_here.count(v->Name()) ||
          producers[v->Name()] != 1) {
        keep[b].insert(v->Name());
      }
    }
  }
  ProgramDesc copy(program);
  for (size_t b = 0; b < copy.Size(); ++b) {
    std::vector<std::string> drop;
    for (const auto& v : copy.Block(b)->AllVars())
      if (!keep[b].count(v->Name())) drop.push_back(v->Name());
    for (const std::string& name : drop) copy.Block(b)->RemoveVar(name);
  }
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  try {
    for (size_t b = 0; b < copy.Size(); ++b) {
      BlockDesc* block = copy.Block(b);
      for (size_t i = 0; i < block->OpSize(); ++i) {
        const OpDesc& op = *block->Op(i);
        InferOpAtBuildTime(op, *block, *registry);
        for (const std::string& out : op.OutputArgumentNames()) {
          const VarDesc* original = program.Block(b)->FindVar(out);
          if (!original || keep[b].count(out)) continue;
          const VarDesc* again = block->FindVar(out);
          if (!again || !SameVarInfo(*original, *again)) {
            keep[b].insert(out);
            CopyVarInfo(*original, block->Var(out));
          }
        }
      }
    }
  } catch (const std::exception&) {
    return all;  // an op not registered now, or inference that fails without the dropped vars
  }
  return keep;
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

ProgramDesc ParseProgram(const std::string& yaml_text, const std::string& source_name) {
  const std::string source = source_name.empty() ? "<program>" : source_name;
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  Parser parser(source, *registry);
  ProgramDesc program;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    program = parser.Parse(root);
  } catch (const YAML::ParserException& e) {
    parser.Fail(ErrorKind::kInvalidArgument, e.mark, "invalid YAML: ", e.msg);
  } catch (const YAML::Exception& e) {
    parser.Fail(ErrorKind::kInvalidArgument, e.mark, "bad program file: ", e.msg);
  }
  for (size_t b = 0; b < program.Size(); ++b) {
    for (const auto& op : program.Block(b)->AllOps()) FillDefaultAttrs(*op, *registry, &program);
  }
  // Verified before inference too, so a missing slot or an undefined input is
  // reported as such rather than as a failure inside some shape function.
  VerifyProgram(program, *registry);
  InferProgram(program);
  VerifyProgram(program, *registry);
  return program;
}

ProgramDesc LoadProgram(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    NABLA_ENFORCE(err != ENOENT, kNotFound, "program file '", path, "' does not exist: expected a YAML program file");
    NABLA_THROW(kInvalidArgument, "cannot open program file '", path, "': ", std::strerror(err));
  }
  NABLA_ENFORCE(!S_ISDIR(st.st_mode), kInvalidArgument, "cannot read program file '", path,
                "': expected a YAML file but received a folder");
  std::ifstream in(path, std::ios::binary);
  NABLA_ENFORCE(in, kInvalidArgument, "cannot open program file '", path, "': ", ErrnoText());
  std::ostringstream text;
  text << in.rdbuf();
  NABLA_ENFORCE(!in.bad(), kExternal, "cannot read program file '", path, "': ", ErrnoText());
  return ParseProgram(text.str(), path);
}

std::vector<PluginRequirement> PluginsOf(const ProgramDesc& program) {
  std::map<std::string, PluginRequirement> by_name;
  std::set<std::string> types;
  for (size_t b = 0; b < program.Size(); ++b)
    for (const auto& op : program.Block(b)->AllOps()) types.insert(op->Type());
  auto registry = CurrentRegistry();
  for (const std::string& type : types) {
    const OpInfo* info = registry->Find(type);
    // In-process ops (tests, embedding apps) belong to no plugin.
    if (info == nullptr || info->origin.plugin.empty()) continue;
    PluginRequirement& p = by_name[info->origin.plugin];
    p.name = info->origin.plugin;
    p.version = PluginVersion(p.name);
    p.ops.push_back(type);
  }
  std::vector<PluginRequirement> out;
  for (auto& [name, p] : by_name) out.push_back(std::move(p));
  return out;
}

std::string ProgramToYaml(const ProgramDesc& program) {
  std::vector<std::unordered_set<std::string>> vars = VarsToWrite(program);
  YAML::Emitter out;
  out.SetIndent(2);
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << kFormatVersion;
  if (const std::vector<PluginRequirement> plugins = PluginsOf(program); !plugins.empty()) {
    out << YAML::Key << "plugins" << YAML::Value << YAML::BeginSeq;
    for (const PluginRequirement& p : plugins) {
      out << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "name" << YAML::Value;
      EmitString(out, p.name);
      if (!p.version.empty()) {
        out << YAML::Key << "version" << YAML::Value << YAML::DoubleQuoted << p.version;
      }
      out << YAML::Key << "ops" << YAML::Value;
      EmitNames(out, p.ops);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::Key << "blocks" << YAML::Value << YAML::BeginSeq;
  for (size_t b = 0; b < program.Size(); ++b) {
    const BlockDesc* block = program.Block(b);
    out << YAML::BeginMap;
    out << YAML::Key << "idx" << YAML::Value << block->Idx();
    out << YAML::Key << "parent" << YAML::Value << block->ParentIdx();
    out << YAML::Key << "vars" << YAML::Value;
    if (vars[b].empty()) {
      out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    } else {
      out << YAML::BeginMap;
      for (const auto& v : block->AllVars()) {
        if (!vars[b].count(v->Name())) continue;
        out << YAML::Key;
        EmitString(out, v->Name());
        out << YAML::Value;
        EmitVar(out, *v);
      }
      out << YAML::EndMap;
    }
    out << YAML::Key << "ops" << YAML::Value;
    if (block->OpSize() == 0) {
      out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
    } else {
      out << YAML::BeginSeq;
      for (const auto& op : block->AllOps()) EmitOp(out, *op);
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (const auto& bw = program.Backward()) {
    out << YAML::Key << "backward" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "loss" << YAML::Value;
    EmitString(out, bw->loss);
    out << YAML::Key << "param_grads" << YAML::Value << YAML::BeginSeq;
    for (const auto& [param, grad] : bw->param_grads) EmitNames(out, {param, grad});
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndMap;
  NABLA_ENFORCE(out.good(), kExternal, "writing the program as YAML failed: ", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

void SaveProgram(const ProgramDesc& program, const std::string& path) {
  WriteFileAtomically(path, ProgramToYaml(program));
}

void WriteFileAtomically(const std::string& path, const std::string& data) {
  // The temp file sits in the target's folder so rename() never crosses a
  // file system; open() with 0666 lets the umask pick the final permissions.
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  NABLA_ENFORCE(fd >= 0, kExternal, "cannot write '", path, "': creating the temporary file '", tmp,
                "' failed: ", ErrnoText());
  auto fail = [&](const char* step) {
    std::string why = ErrnoText();
    ::close(fd);
    ::unlink(tmp.c_str());
    NABLA_THROW(kExternal, "cannot write '", path, "': ", step, " failed: ", why);
  };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    std::string why = ErrnoText();
    ::unlink(tmp.c_str());
    NABLA_THROW(kExternal, "cannot write '", path, "': close failed: ", why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = ErrnoText();
    ::unlink(tmp.c_str());
    NABLA_THROW(kExternal, "cannot write '", path, "': renaming '", tmp, "' failed: ", why);
  }
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace nabla
