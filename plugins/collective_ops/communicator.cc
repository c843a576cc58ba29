#include "communicator.h"

#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "nabla/error.h"
#include "world_env.h"

namespace nabla::collective {
namespace {

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kBool:
    case DType::kBFloat16:
      break;
  }
  NABLA_THROW(kInvalidArgument, "collectives take float32, float64, int32 or int64 tensors, but received ",
              DTypeName(dtype));
}

int MpiCount(int64_t count, const std::string& what) {
  NABLA_ENFORCE(count >= 0 && count <= INT_MAX, kOutOfRange, what, ": expected at most ", INT_MAX,
                " elements in one collective, but received ", count);
  return static_cast<int>(count);
}

std::string ErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

}  // namespace

Communicator& Communicator::World() {
  static Communicator world;
  return world;
}

Communicator::Communicator() {
  std::optional<LaunchedWorld> launched = WorldFromLauncher();
  if (!launched) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // This plugin was dlopen'ed with RTLD_LOCAL; OpenMPI's own components
    // (dlopen'ed by MPI_Init) bind to libmpi's symbols, so libmpi must be
    // global first.
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr) {
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    }
    // Kernels run on executor threads, one collective at a time (the
    // collective trait orders them), so calls are serialized, not funneled.
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    NABLA_ENFORCE(rc == MPI_SUCCESS, kRuntime, "MPI_Init_thread failed: ", ErrorString(rc));
    initialized_here_ = true;
    NABLA_ENFORCE(provided >= MPI_THREAD_SERIALIZED, kRuntime,
                  "the MPI library offers no MPI_THREAD_SERIALIZED support (provided level ", provided,
                  "); collectives run on executor threads");
  }
  // Errors come back as codes, so they become one-line nabla errors.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  NABLA_ENFORCE(rank_ == launched->rank && size_ == launched->size, kRuntime, "MPI says rank ", rank_, " of ", size_,
                ", but the launcher's environment says rank ", launched->rank, " of ", launched->size);
}

Communicator::~Communicator() {
  // After a failed collective (its error line already printed), leave with
  // exit code 1 and without MPI_Finalize, which would wait for the pending
  // collective forever. The launcher then ends the other ranks (mpirun's
  // default for a non-zero exit); any rank it does not end times out in its
  // own next collective. Not MPI_Abort: after one, Debian's OpenMPI 4.1
  // mpirun now and then crashes (CI: exit 139) or hangs in
  // PMIx_server_finalize, so the job's exit code would not be ours.
  if (initialized_here_ && failed_) {
    std::fflush(nullptr);
    std::_Exit(1);
  }
  if (initialized_here_ && !failed_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

void Communicator::Wait(void* request_ptr, double timeout_s, const std::string& what) {
  MPI_Request& request = *static_cast<MPI_Request*>(request_ptr);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // Nonblocking collectives progress inside MPI_Test, so poll often; after
  // the first millisecond, sleep between polls so a waiting rank leaves the
  // core to the ranks it waits for (ranks often share cores).
  for (int polls = 0;; ++polls) {
    int done = 0;
    int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      failed_ = true;
      NABLA_THROW(kRuntime, what, " failed on rank ", rank_, " of ", size_, ": ", ErrorString(rc));
    }
    if (done) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      failed_ = true;
      NABLA_THROW(kRuntime, what, " timed out on rank ", rank_, " of ", size_, " after ", timeout_s,
                  " s: another rank died, stalled or runs a different program (collective_timeout_s sets the limit)");
    }
    if (waited < 1e-3) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Communicator::Allreduce(const void* in, void* out, int64_t count, DType dtype, double timeout_s,
                             const std::string& what) {
  const int n = MpiCount(count, what);
  if (size_ == 1) return;  // callers copy in to out themselves
  MPI_Request request;
  int rc = MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, MpiType(dtype), MPI_SUM, MPI_COMM_WORLD, &request);
  NABLA_ENFORCE(rc == MPI_SUCCESS, kRuntime, what, " could not start on rank ", rank_, ": ", ErrorString(rc));
  Wait(&request, timeout_s, what);
}

void Communicator::Broadcast(void* buf, int64_t count, DType dtype, int root, double timeout_s,
                             const std::string& what) {
  const int n = MpiCount(count, what);
  NABLA_ENFORCE(root >= 0 && root < size_, kInvalidArgument, what, ": root ", root, " is not a rank of a world of ",
                size_);
  if (size_ == 1) return;
  MPI_Request request;
  int rc = MPI_Ibcast(buf, n, MpiType(dtype), root, MPI_COMM_WORLD, &request);
  NABLA_ENFORCE(rc == MPI_SUCCESS, kRuntime, what, " could not start on rank ", rank_, ": ", ErrorString(rc));
  Wait(&request, timeout_s, what);
}

}  // namespace nabla::collective
