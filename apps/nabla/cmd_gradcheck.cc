// `nabla gradcheck (--op TYPE | --all)`: the numeric gradient check of
// core/gradcheck.h (float64 central differences against the op's own grad
// ops, Paddle's error rule) over the GradCheck cases each op declares next to
// its registration: the cases the op test table runs. For plugin authors:
// `nabla gradcheck --plugin ./libacme.so --all --only-plugin`.
//
// Without --device every op is checked on each device it has float64
// kernels for; where it has float32 kernels too, each case also runs in
// float32 against float64 (nabla/opcheck.h's CheckFloat32Gradient). Failing checks are results, printed on stdout; the
// run then ends with one error line and exit 1.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/opcheck.h"
#include "nabla/types.h"

namespace nabla::app {
namespace {

namespace fs = std::filesystem;

struct GradcheckOptions {
  std::string op;
  bool all = false;
  bool only_plugin = false;  // --all over the ops of the --plugin files only
  std::string device;
};

// The files of the --plugin options as the registry records them
// (canonical); every one has loaded by the time a command runs.
std::set<std::string> CanonicalPaths(const std::vector<std::string>& files) {
  std::set<std::string> paths;
  for (const std::string& f : files) paths.insert(fs::canonical(f).string());
  return paths;
}

// `mul_grad` next to `mul`: checked as part of its forward op, which is
// the only way the harness can run it.
bool IsGradOpOfRegisteredOp(const OpRegistry& registry, const std::string& type) {
  const std::string suffix = "_grad";
  return type.size() > suffix.size() && type.compare(type.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         registry.Find(type.substr(0, type.size() - suffix.size())) != nullptr;
}

bool HasFloat64Kernel(const OpRegistry& registry, const std::string& type, DeviceType device) {
  for (const auto& [d, dtype] : registry.KernelsOf(type))
    if (d == device && dtype == DType::kFloat64) return true;
  return false;
}

// The devices checks can run on: the host, and with --device or when an op
// has float64 kernels for another registered device type, the first device
// of that backend with float64.
class Devices {
 public:
  explicit Devices(const std::string& requested) {
    if (!requested.empty()) fixed_ = &Resolve(requested);
  }

  // The devices to check `type` on; `note` says why one is left out.
  std::vector<Device*> For(const OpRegistry& registry, const std::string& type, std::string* note) {
    if (fixed_ != nullptr) {
      if (HasFloat64Kernel(registry, type, fixed_->Type())) return {fixed_};
      *note = StrCat("no float64 kernel on ", DeviceTypeName(fixed_->Type()));
      return {};
    }
    std::vector<Device*> out = {&HostDevice()};
    for (const std::string& backend : DeviceBackendNames()) {
      DeviceType device_type;
      if (!ParseDeviceType(backend, &device_type) || device_type == HostDevice().Type() ||
          device_type == NullDeviceType() || !HasFloat64Kernel(registry, type, device_type))
        continue;
      Accelerator& a = Open(backend);
      if (a.device != nullptr) {
        out.push_back(a.device);
      } else {
        *note += (note->empty() ? "" : "; ") + a.note;
      }
    }
    return out;
  }

 private:
  struct Accelerator {
    bool tried = false;
    Device* device = nullptr;  // non-owning: process-wide devices
    std::string note;
  };

  static Device& Resolve(const std::string& name) {
    Device& d = ResolveDevice(name);
    NABLA_ENFORCE(!IsDryRun(d), kInvalidArgument, "--device ", name,
                  ": a dry-run device has no data, and gradient checks compare numbers");
    DeviceListing listing;
    if (FindDeviceListing(name, &listing))
      NABLA_ENFORCE(listing.fp64, kPreconditionNotMet, "--device ", name, ": ",
                    listing.detail.empty() ? listing.spec : listing.detail.front(),
                    " has no float64 support, which gradient checks need");
    return d;
  }

  // The backend's first device with float64, opened once; null (and a
  // note) when there is none.
  Accelerator& Open(const std::string& backend) {
    Accelerator& a = accelerators_[backend];
    if (a.tried) return a;
    a.tried = true;
    try {
      for (const DeviceListing& l : EnumerateDevices(backend)) {
        if (l.fp64) {
          a.device = &ResolveDevice(l.spec);
          return a;
        }
      }
      a.note = StrCat("not checked on ", backend, ": no ", backend, " device with float64 support");
    } catch (const std::exception& e) {
      a.note = StrCat("not checked on ", backend, ": ", e.what());
    }
    return a;
  }

  Device* fixed_ = nullptr;  // non-owning
  std::map<std::string, Accelerator> accelerators_;
};

std::string Sci(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2e", v);
  return s;
}

std::string DeviceLabel(const Device& d) {
  return &d == &HostDevice() ? std::string(DeviceTypeName(d.Type())) : StrCat(DeviceTypeName(d.Type()), ":", d.Id());
}

int RunGradcheck(const GradcheckOptions& opts, const GlobalOptions& global) {
  NABLA_ENFORCE(opts.all != !opts.op.empty(), kInvalidArgument,
                "expected exactly one of --op TYPE and --all but received ", opts.all ? "both" : "neither");
  NABLA_ENFORCE(!opts.only_plugin || opts.all, kInvalidArgument, "--only-plugin only applies with --all");
  NABLA_ENFORCE(!opts.only_plugin || !global.plugins.empty(), kInvalidArgument,
                "gradcheck --only-plugin: expected at least one --plugin FILE but received none");
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();

  std::vector<std::string> types;
  std::vector<std::string> without_gradient;
  if (!opts.op.empty()) {
    registry->Get(opts.op);  // an unknown op is a NotFound error naming it and the plugins
    types.push_back(opts.op);
  } else {
    const std::set<std::string> files = CanonicalPaths(opts.only_plugin ? global.plugins : std::vector<std::string>{});
    for (const std::string& type : registry->OpTypes()) {
      const OpInfo& info = registry->Get(type);
      if (!files.empty() && !files.count(info.origin.path)) continue;
      if (IsGradOpOfRegisteredOp(*registry, type)) continue;
      types.push_back(type);
    }
    NABLA_ENFORCE(!types.empty(), kNotFound, "--all: the selected plugins register no ops");
  }
  Devices devices(opts.device);

  size_t width = 4;
  for (const std::string& type : types) width = std::max(width, type.size());
  auto line = [&](const std::string& status, const std::string& type, const std::string& where,
                  const std::string& rest) {
    std::cout << std::left << std::setw(4) << status << "  " << std::setw(static_cast<int>(width)) << type << "  "
              << std::setw(9) << where << "  " << rest << "\n";
  };

  int passed = 0, skipped = 0;
  std::vector<std::string> failed;
  for (const std::string& type : types) {
    const OpInfo& info = registry->Get(type);
    if (!info.HasGradient()) {
      if (opts.all) {
        without_gradient.push_back(type);
      } else {
        line("SKIP", type, "-",
             info.HasGradMaker() ? "its GradOpDescMaker emits no grad ops"
                                 : "no gradient: the op registers no GradOpDescMaker");
        ++skipped;
      }
      continue;
    }
    std::string note;
    const std::vector<Device*> on = devices.For(*registry, type, &note);
    if (on.empty()) {
      line("SKIP", type, opts.device, note);
      ++skipped;
      continue;
    }
    for (Device* device : on) {
      std::vector<GradCheckResult> results = CheckOpGradients(type, *device);
      // The float64 check says nothing of the float32 grad kernels a
      // training run uses: each case again in float32, held to float64.
      if (HasFloat32Kernels(type, *device))
        for (const GradCheckSpec& spec : info.grad_checks) {
          GradCheckResult r32 = CheckFloat32Gradient(type, spec, *device);
          r32.case_name = spec.name + " (float32)";
          results.push_back(std::move(r32));
        }
      if (results.empty()) {
        // The same on every device: say it once. Under --all, an op whose
        // maker emits no grad ops (fill_constant, sgd) joins the note on ops
        // without a gradient.
        const bool runs_blocks = info.traits.has_sub_block || info.traits.control_flow;
        if (opts.all && !runs_blocks) {
          without_gradient.push_back(type);
        } else {
          line("SKIP", type, "-",
               runs_blocks ? "runs a sub-block: its gradient is checked through whole programs"
                           : "its GradOpDescMaker emits no grad ops");
          ++skipped;
        }
        break;
      }
      bool ok = true;
      double worst = 0.0;
      for (const GradCheckResult& r : results) {
        ok = ok && r.ok;
        worst = std::max(worst, r.max_error);
      }
      // The harness reports a gradient without any case as one failed, unnamed result.
      const bool no_case = results.size() == 1 && results[0].case_name.empty() && !results[0].ok;
      line(ok ? "PASS" : "FAIL", type, DeviceLabel(*device),
           StrCat(no_case ? std::string("no GradCheck case")
                          : StrCat("max error ", Sci(worst), " over ", results.size(),
                                   results.size() == 1 ? " case" : " cases"),
                  info.origin.plugin.empty() ? "" : " (" + info.origin.plugin + ")"));
      for (const GradCheckResult& r : results) {
        for (const std::string& f : r.failures)
          std::cout << "      " << (r.case_name.empty() ? "" : "case '" + r.case_name + "': ") << f << "\n";
      }
      if (ok) {
        ++passed;
      } else {
        failed.push_back(type + " on " + DeviceLabel(*device));
      }
    }
    if (!note.empty()) std::cout << "      note: " << type << " " << note << "\n";
  }

  // --device names what the user wants checked: checking nothing there is
  // no pass (a plugin without kernels for that device).
  NABLA_ENFORCE(opts.device.empty() || passed + failed.size() > 0, kNotFound, "gradcheck --device ", opts.device,
                " checked nothing: no selected op with a gradient has a float64 kernel on ", opts.device,
                " (an op without one runs its cpu kernel on host copies there); register kernels for it or drop "
                "--device");
  const size_t checks = passed + failed.size() + skipped;
  std::cout << checks << (checks == 1 ? " check: " : " checks: ") << passed << " passed, " << failed.size()
            << " failed, " << skipped << " skipped\n";
  if (!without_gradient.empty()) {
    std::string names;
    for (const std::string& t : without_gradient) names += (names.empty() ? "" : ", ") + t;
    std::cout << "not checked, no gradient: " << names << "\n";
  }
  if (!failed.empty()) {
    std::string names;
    for (const std::string& f : failed) names += (names.empty() ? "" : ", ") + f;
    NABLA_THROW(kRuntime, "gradient check failed for ", failed.size(), failed.size() == 1 ? " op: " : " ops: ", names);
  }
  return 0;
}

}  // namespace

Command GradcheckCommand() {
  auto opts = std::make_shared<GradcheckOptions>();
  Command c("gradcheck",
            "Check op gradients against float64 central differences (the GradCheck cases each op registers)");
  c.Option("--op", &opts->op, "The op type to check", "TYPE");
  c.Flag("--all", &opts->all, "Check every op that has a gradient");
  c.Flag("--only-plugin", &opts->only_plugin, "With --all: only the ops that the --plugin files registered");
  c.Option("--device", &opts->device,
           "Check on this device only, a registered one (" + RegisteredDeviceNames() +
               ", or a device plugin's given with --plugin) with an optional index (default: every device the op has "
               "float64 kernels for)",
           "NAME[:N]");
  c.SetRun([opts](const GlobalOptions& global) { return RunGradcheck(*opts, global); });
  return c;
}

}  // namespace nabla::app
