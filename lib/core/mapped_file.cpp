#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace ckv {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO (or a device that waits) returns at once, so the regular-file
  // check below refuses it instead of blocking forever. It has no effect on regular files.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail<IoError>("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail<IoError>("{}: cannot stat: {}", path.string(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail<IoError>("{}: not a regular file", path.string());
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail<IoError>("{}: cannot map: {}", path.string(), std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    owns_mapping_ = true;
  }
  ::close(fd);
}

MappedFile MappedFile::from_memory(std::span<const uint8_t> bytes, std::filesystem::path name) {
  MappedFile f;
  f.path_ = std::move(name);
  f.data_ = bytes.data();
  f.size_ = bytes.size();
  return f;
}

MappedFile::~MappedFile() {
  if (owns_mapping_ && data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owns_mapping_(std::exchange(other.owns_mapping_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (owns_mapping_ && data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_mapping_ = std::exchange(other.owns_mapping_, false);
  }
  return *this;
}

}  // namespace ckv
