#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "checked_internal.h"
#include "nabla/error.h"

namespace nabla {
namespace checked {
namespace {

constexpr size_t kFront = 64;  // keeps the data 64-byte aligned, as the devices promise
constexpr unsigned char kCanary = 0xFD;
// Fresh buffers hold all-ones bytes (NaN for floats, -1 for integers), not
// the zeros of new pages: a kernel that reads the part of its output it
// never wrote sees garbage here too, as it would from a reused block.
constexpr unsigned char kFresh = 0xFF;

bool EnvOn() {
  const char* v = std::getenv("NABLA_CHECKED");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

size_t Page() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
size_t Round64(size_t n) { return (n + 63) / 64 * 64; }

struct Region {
  void* base;
  size_t mapped;
  size_t bytes;
};

std::mutex& Mutex() {
  static std::mutex m;
  return m;
}
// Keyed by the data pointer; ordered, so the fault handler finds the buffer
// whose inaccessible page a faulting address is in.
std::map<const char*, Region>& Regions() {
  static auto* r = new std::map<const char*, Region>;  // outlives static destructors' frees
  return *r;
}
std::vector<const FaultReporter*>& Reporters() {
  static auto* r = new std::vector<const FaultReporter*>;
  return *r;
}

struct sigaction g_previous;

void OnSegv(int, siginfo_t* info, void*) {
  const char* addr = static_cast<const char*>(info->si_addr);
  std::string line;
  // try_lock: the fault may have come while this thread held the lock.
  if (Mutex().try_lock()) {
    auto& regions = Regions();
    auto it = regions.upper_bound(addr);
    if (it != regions.begin()) {
      --it;
      const char* page = it->first + Round64(it->second.bytes);
      if (addr >= page && addr < page + Page()) {
        for (const FaultReporter* r : Reporters()) {
          line = r->Describe(it->first);
          if (!line.empty()) break;
        }
        if (line.empty())
          line = StrCat("checked mode: a kernel wrote past the end of a ", it->second.bytes,
                        "-byte buffer that is no op's output (a kernel's scratch tensor?)");
      }
    }
    Mutex().unlock();
  }
  if (!line.empty()) {
    line = "nabla: error: " + line + "\n";
    ssize_t written = write(STDERR_FILENO, line.data(), line.size());
    (void)written;
    _exit(1);
  }
  // Not a guard page: the handler from before takes the fault when the
  // instruction runs again.
  sigaction(SIGSEGV, &g_previous, nullptr);
}

void InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = OnSegv;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous);
  });
}

}  // namespace

std::atomic<bool> g_on{EnvOn()};

void* AllocateGuarded(size_t bytes, std::function<void()>* release) {
  InstallHandler();
  const size_t page = Page();
  const size_t body = Round64(bytes);
  const size_t mapped = (kFront + body + page - 1) / page * page + page;
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  NABLA_ENFORCE(base != MAP_FAILED, kExternal, "out of host memory allocating ", bytes, " bytes (checked mode)");
  char* guard = static_cast<char*>(base) + mapped - page;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    munmap(base, mapped);
    NABLA_THROW(kExternal, "checked mode cannot protect a guard page (", std::strerror(errno), ")");
  }
  char* data = guard - body;
  std::memset(data - kFront, kCanary, kFront);
  std::memset(data, kFresh, bytes);
  std::memset(data + bytes, kCanary, body - bytes);
  {
    std::lock_guard<std::mutex> lock(Mutex());
    Regions()[data] = {base, mapped, bytes};
  }
  *release = [data, base, mapped] {
    {
      std::lock_guard<std::mutex> lock(Mutex());
      Regions().erase(data);
    }
    munmap(base, mapped);
  };
  return data;
}

bool IsGuardedExactly(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(Mutex());
  auto it = Regions().find(static_cast<const char*>(data));
  return it != Regions().end() && it->second.bytes == bytes;
}

GuardCheck CheckGuards(const void* data) {
  GuardCheck c;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(Mutex());
    auto it = Regions().find(static_cast<const char*>(data));
    if (it == Regions().end()) return c;
    bytes = it->second.bytes;
  }
  c.guarded = true;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < kFront; ++i)
    if (p[-static_cast<ptrdiff_t>(kFront - i)] != kCanary) {
      c.overwritten_before = kFront - i;
      break;
    }
  for (size_t i = Round64(bytes); i > bytes; --i)
    if (p[i - 1] != kCanary) {
      c.overwritten_after = i - bytes;
      break;
    }
  return c;
}

void SetFaultReporter(const FaultReporter* reporter, bool active) {
  InstallHandler();
  std::lock_guard<std::mutex> lock(Mutex());
  auto& r = Reporters();
  if (active) {
    r.push_back(reporter);
  } else {
    r.erase(std::remove(r.begin(), r.end(), reporter), r.end());
  }
}

}  // namespace checked

void SetCheckedMode(bool on) { checked::g_on.store(on, std::memory_order_relaxed); }
bool CheckedMode() { return checked::On(); }
bool ExactBuffers() { return checked::kAddressSanitizer || checked::On(); }

}  // namespace nabla
