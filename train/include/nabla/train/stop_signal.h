#pragma once
// Ctrl-C and SIGTERM during `nabla run`: the first asks the train loop to
// stop after the current step (it then writes a checkpoint); a second one
// ends the process at once, leaving the checkpoints on disk as they are
// (every write is atomic, so the last good one stays intact).
namespace nabla::train {

// Installs the handlers for its lifetime and restores the old ones after.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal that asked to stop (SIGINT, SIGTERM), 0 when none has.
  static int Pending();
  // "SIGINT", "SIGTERM".
  static const char* Name(int sig);
};

}  // namespace nabla::train
