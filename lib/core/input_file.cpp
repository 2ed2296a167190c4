#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ckv {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

void check_mode(const std::filesystem::path& path, std::string_view what, mode_t mode) {
  if (!S_ISREG(mode))
    fail<InputError>("{}: {} is {}, not a regular file", path.string(), what, kind_of(mode));
}

}  // namespace

void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    // A path that names nothing is a bad input, as every reader said before this check.
    if (errno == ENOENT || errno == ENOTDIR)
      fail<InputError>("{}: cannot read {}: {}", path.string(), what, std::strerror(errno));
    fail<IoError>("{}: cannot read {}: {}", path.string(), what, std::strerror(errno));
  }
  check_mode(path, what, st.st_mode);
}

std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                              size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail<IoError>("{}: cannot read {}: {}", path.string(), what, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    fail<IoError>("{}: cannot read {}: {}", path.string(), what, std::strerror(errno));
  check_mode(path, what, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    fail<InputError>("{}: {} is {} bytes, more than the {} ckv reads", path.string(), what,
                     st.st_size, max_bytes);
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char block[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, block, sizeof block);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail<IoError>("{}: cannot read {}: {}", path.string(), what, std::strerror(errno));
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes)
      fail<InputError>("{}: {} is larger than the {} bytes ckv reads", path.string(), what,
                       max_bytes);
    text.append(block, static_cast<size_t>(n));
  }
  return text;
}

void refuse_nul_in_json(std::string_view json_text, std::string_view where) {
  if (const size_t at = json_text.find('\0'); at != std::string_view::npos)
    fail<InputError>("{}: a raw NUL byte at offset {}, not valid JSON", where, at);
}

}  // namespace ckv
