#pragma once
// Whether this process was started by an MPI launcher, read from the
// environment the launcher sets (no MPI call, no MPI library): the trainer
// and the collective_ops plugin both ask here, so a plain `nabla run` never
// initialises MPI and both agree on the rank and world size.
#include <optional>

namespace nabla::collective {

struct LaunchedWorld {
  int rank = 0;
  int size = 1;
};

// The rank and size the launcher gave this process (OpenMPI's mpirun sets
// OMPI_COMM_WORLD_RANK/SIZE; MPICH's and others' PMI_RANK/PMI_SIZE), or
// nothing when no launcher started it. A malformed value is an error.
std::optional<LaunchedWorld> WorldFromLauncher();

}  // namespace nabla::collective
