#pragma once
// The MPI world of the collective ops (ring 0). MPI is initialised on first
// use, and only when an MPI launcher started the process (world_env.h);
// otherwise the world is this process alone and collectives copy X to Out.
// MPI stays inside this plugin: no header outside it includes <mpi.h>.
#include <cstdint>
#include <string>

#include "nabla/types.h"

namespace nabla::collective {

class Communicator {
 public:
  // The process-wide world; the first call may initialise MPI.
  static Communicator& World();

  int Rank() const { return rank_; }
  int Size() const { return size_; }

  // Sums `count` elements of every rank into `out` (in place when in == out).
  // Waits at most `timeout_s` seconds (0: no limit); `what` names the op in
  // errors.
  void Allreduce(const void* in, void* out, int64_t count, DType dtype, double timeout_s, const std::string& what);
  // Rank `root`'s `count` elements into `buf` on every rank.
  void Broadcast(void* buf, int64_t count, DType dtype, int root, double timeout_s, const std::string& what);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

 private:
  Communicator();
  // Polls a started request until it completes or `timeout_s` passes.
  void Wait(void* request, double timeout_s, const std::string& what);

  int rank_ = 0;
  int size_ = 1;
  bool initialized_here_ = false;
  // A collective that timed out may still be pending; MPI_Finalize would
  // then wait for it forever, so the process exits without it.
  bool failed_ = false;
};

}  // namespace nabla::collective
