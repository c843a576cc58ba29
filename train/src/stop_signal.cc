#include "nabla/train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace nabla::train {

namespace {

std::atomic<int> g_pending{0};
struct sigaction g_old_int, g_old_term;

void OnStopSignal(int sig) {
  int expected = 0;
  if (!g_pending.compare_exchange_strong(expected, sig)) {
    // Second signal: the user wants out now. _exit is async-signal-safe and
    // skips destructors that could be mid-way through a write.
    _exit(128 + sig);
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_pending = 0;
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not fail the read or write under way
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::Pending() { return g_pending.load(); }

const char* StopSignals::Name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace nabla::train
