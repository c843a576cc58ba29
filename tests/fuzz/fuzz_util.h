#pragma once
// The readers under fuzzing take paths, as `nabla` calls them: each input
// becomes the content of one in-memory file, reached through /proc.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace nabla::fuzz {

inline std::string AsFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("nabla_fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace nabla::fuzz
