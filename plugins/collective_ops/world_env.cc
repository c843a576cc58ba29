#include "world_env.h"

#include <cstdlib>
#include <string>

#include "nabla/error.h"

namespace nabla::collective {
namespace {

std::optional<int> IntEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  NABLA_ENFORCE(*v != '\0' && *end == '\0' && x >= 0 && x < (1L << 30), kInvalidArgument, "the environment variable ",
                name, " must be a non-negative integer, but received '", v, "'");
  return static_cast<int>(x);
}

}  // namespace

std::optional<LaunchedWorld> WorldFromLauncher() {
  for (const auto& [rank_var, size_var] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    std::optional<int> rank = IntEnv(rank_var), size = IntEnv(size_var);
    if (!rank && !size) continue;
    NABLA_ENFORCE(rank && size, kInvalidArgument, "the MPI launcher set only one of ", rank_var, " and ", size_var);
    NABLA_ENFORCE(*size >= 1 && *rank < *size, kInvalidArgument, "the MPI launcher's ", rank_var, "=", *rank,
                  " is not a rank of ", size_var, "=", *size);
    return LaunchedWorld{*rank, *size};
  }
  return std::nullopt;
}

}  // namespace nabla::collective
