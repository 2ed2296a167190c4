#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace ckv {
namespace fs = std::filesystem;

namespace {

// The type of what a path names, without following a final symbolic link.
fs::file_type type_no_follow(const fs::path& p) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(p, ec);
  return ec ? fs::file_type::not_found : s.type();
}

const char* kind_name(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::symlink:
      return "a symbolic link";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "a special file";
  }
}

fs::path directory_of(const fs::path& final_path) {
  return final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path();
}

// fsync of a file or directory by path; directories need O_RDONLY too.
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail<IoError>("{}: cannot open to flush: {}", p.string(), std::strerror(errno));
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    // Some file systems cannot fsync a directory; the rename is still done.
    if (directory && (err == EINVAL || err == ENOTSUP)) return;
    fail<IoError>("{}: flushing to disk failed: {}", p.string(), std::strerror(err));
  }
  ::close(fd);
}

// Takes the exclusive lock of an output: the descriptor of the locked file, or -1 where
// the file system has no flock (warned). Throws InputError when another process holds it.
// The lock file is unlinked by its holder at release; a process that opened it just before
// then holds a lock on a file no longer under the name, so it checks and tries again.
int take_lock(const fs::path& lock, const std::string& output) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
      const int err = errno;
      if (err == ELOOP) fail<InputError>("{}: {} is a symbolic link, not ckv's lock file: remove it", output, lock.string());
      fail<IoError>("{}: cannot create the lock file {}: {}", output, lock.string(), std::strerror(err));
    }
    struct stat held {};
    if (::fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
      ::close(fd);
      fail<InputError>("{}: {} is not a regular file, not ckv's lock file: remove it", output, lock.string());
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        char text[32] = {};
        const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
        ::close(fd);
        std::string pid(text, n > 0 ? static_cast<size_t>(n) : 0);
        while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
        const bool numeric = !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos;
        fail<InputError>("{}: another ckv process{} is writing this output; wait for it to finish or stop it",
                         output, numeric ? fmt::format(" (pid {})", pid) : std::string());
      }
      ::close(fd);
      ::unlink(lock.c_str());
      if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
        fmt::print(stderr, "ckv: warning: {}: the file system has no file locks; a second writer of this output "
                           "would not be detected\n", output);
        return -1;
      }
      fail<IoError>("{}: cannot lock {}: {}", output, lock.string(), std::strerror(err));
    }
    struct stat now {};
    if (::stat(lock.c_str(), &now) != 0 || now.st_ino != held.st_ino || now.st_dev != held.st_dev) {
      ::close(fd);  // its previous holder removed it after we opened it
      continue;
    }
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      // The pid is only for the message of a refused second writer.
    }
    return fd;
  }
  fail<IoError>("{}: cannot take the lock {}: it keeps changing", output, lock.string());
}

void release_lock(int fd, const fs::path& lock) noexcept {
  if (fd < 0) return;
  ::unlink(lock.c_str());  // while still held: see take_lock
  ::close(fd);
}

}  // namespace

struct AtomicOutput::Checked {
  bool have_final = false;
  bool have_partial = false;
};

fs::path AtomicOutput::partial_path_for(const fs::path& final_path) {
  std::string name(1, '.');
  name.append(final_path.filename().string()).append(".partial");
  return final_path.parent_path() / name;
}

fs::path AtomicOutput::lock_path_for(const fs::path& final_path) {
  std::string name(1, '.');
  name.append(final_path.filename().string()).append(".lock");
  return final_path.parent_path() / name;
}

AtomicOutput::Checked AtomicOutput::inspect(const fs::path& final_path, const AtomicOutputOptions& options) {
  (void)options;  // the refusals that depend on them come under the lock (refuse_without_flags)
  const std::string name = final_path.string();
  if (final_path.filename().empty() || final_path.filename() == "." || final_path.filename() == "..")
    fail<InputError>("{}: output path names a directory, not a file", name);
  const fs::path dir = directory_of(final_path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail<IoError>("{}: output directory {} does not exist", name, dir.string());
  const fs::file_type final_type = type_no_follow(final_path);
  if (final_type != fs::file_type::not_found && final_type != fs::file_type::regular)
    fail<InputError>("{}: the output is {}, not a regular file (ckv writes only regular files{})", name,
                     kind_name(final_type),
                     final_type == fs::file_type::symlink ? "; give the path the link points to" : "");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail<IoError>("{}: output directory {} is not writable: {}", name, dir.string(), std::strerror(errno));
  const fs::path partial = partial_path_for(final_path);
  const fs::file_type partial_type = type_no_follow(partial);
  if (partial_type != fs::file_type::not_found && partial_type != fs::file_type::regular)
    fail<InputError>("{}: {} is {}, not a partial file of ckv: remove it", name, partial.string(),
                     kind_name(partial_type));
  return {final_type == fs::file_type::regular, partial_type == fs::file_type::regular};
}

// The refusals that depend on the flags: called with the lock held, so that a second writer
// is told about the running one (and its pid) whatever its flags, not about the partial
// file the running one is writing.
void AtomicOutput::refuse_without_flags(const fs::path& final_path, const AtomicOutputOptions& options,
                                        const Checked& c) {
  const std::string name = final_path.string();
  const fs::path partial = partial_path_for(final_path);
  if (!options.force && !options.resume) {
    if (c.have_final)
      fail<InputError>("{}: output exists; use --force to overwrite it{}", name,
                       options.resumable ? " or --resume to continue it" : "");
    if (c.have_partial && options.resumable)
      fail<InputError>("{}: an interrupted run left {}; use --resume to continue it or --force to start over",
                       name, partial.string());
  }
}

void AtomicOutput::check(const fs::path& final_path, AtomicOutputOptions options) {
  inspect(final_path, options);
  const fs::path lock = lock_path_for(final_path);
  const int fd = take_lock(lock, final_path.string());
  try {
    refuse_without_flags(final_path, options, inspect(final_path, options));
  } catch (...) {
    release_lock(fd, lock);
    throw;
  }
  release_lock(fd, lock);
}

AtomicOutput::AtomicOutput(fs::path final_path, AtomicOutputOptions options)
    : final_path_(std::move(final_path)),
      partial_path_(partial_path_for(final_path_)),
      lock_path_(lock_path_for(final_path_)),
      options_(options) {
  const std::string name = final_path_.string();
  inspect(final_path_, options_);  // the type refusals before a lock file is created
  lock_fd_ = take_lock(lock_path_, name);
  try {
    // Again under the lock: the previous writer may have finished meanwhile.
    const Checked c = inspect(final_path_, options_);
    refuse_without_flags(final_path_, options_, c);
    std::error_code ec;
    if ((options_.force && !options_.resume) || (!options_.resumable && !options_.resume)) {
      // Start over; the old final file stays until commit() renames over it. A stale
      // partial file's writer is dead (the lock was free).
      if (c.have_partial && !fs::remove(partial_path_, ec))
        fail<IoError>("{}: cannot remove stale partial file: {}", partial_path_.string(), ec.message());
    } else if (options_.resume) {
      if (c.have_partial) {
        continuing_ = true;
      } else if (c.have_final) {
        // Continue a complete output (e.g. more records): it goes back to the partial name
        // so that the final name never holds a file being modified.
        fs::rename(final_path_, partial_path_, ec);
        if (ec)
          fail<IoError>("{}: cannot move to {} to resume: {}", name, partial_path_.string(), ec.message());
        continuing_ = true;
        reopened_final_ = true;
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !options_.resumable && !partial_path_.empty() &&
      type_no_follow(partial_path_) == fs::file_type::regular) {
    std::error_code ignored;
    fs::remove(partial_path_, ignored);
  }
  release();
}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      partial_path_(std::move(other.partial_path_)),
      lock_path_(std::move(other.lock_path_)),
      options_(other.options_),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      continuing_(other.continuing_),
      reopened_final_(other.reopened_final_),
      committed_(other.committed_) {
  other.partial_path_.clear();  // the moved-from object owns nothing
}

AtomicOutput& AtomicOutput::operator=(AtomicOutput&& other) noexcept {
  if (this != &other) {
    release();
    final_path_ = std::move(other.final_path_);
    partial_path_ = std::move(other.partial_path_);
    lock_path_ = std::move(other.lock_path_);
    options_ = other.options_;
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    continuing_ = other.continuing_;
    reopened_final_ = other.reopened_final_;
    committed_ = other.committed_;
    other.partial_path_.clear();
  }
  return *this;
}

void AtomicOutput::release() noexcept {
  release_lock(lock_fd_, lock_path_);
  lock_fd_ = -1;
}

void AtomicOutput::restart() {
  std::error_code ec;
  if (type_no_follow(partial_path_) == fs::file_type::regular && !fs::remove(partial_path_, ec))
    fail<IoError>("{}: cannot remove {} to start over: {}", final_path_.string(), partial_path_.string(),
                  ec.message());
  continuing_ = false;
  reopened_final_ = false;
}

void AtomicOutput::commit() {
  if (committed_) return;
  const std::string name = final_path_.string();
  const fs::file_type partial_type = type_no_follow(partial_path_);
  if (partial_type == fs::file_type::not_found)
    fail<IoError>("{}: nothing to commit, {} was not written", name, partial_path_.string());
  if (partial_type != fs::file_type::regular)
    fail<IoError>("{}: {} is now {}: not renamed", name, partial_path_.string(), kind_name(partial_type));
  const fs::file_type final_type = type_no_follow(final_path_);
  if (final_type != fs::file_type::not_found && final_type != fs::file_type::regular)
    fail<IoError>("{}: is now {}, not a regular file: not replaced (the result stays in {})", name,
                  kind_name(final_type), partial_path_.string());
  fsync_path(partial_path_, false);
  int status = -1;
  if (!options_.force && !options_.resume) {
    // Nothing was there when the run started: never replace what appeared since.
    status = ::renameat2(AT_FDCWD, partial_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_NOREPLACE);
    if (status != 0 && errno == EEXIST)
      fail<IoError>("{}: appeared while this run was writing it: not replaced (the result stays in {})", name,
                    partial_path_.string());
    if (status != 0 && errno != EINVAL && errno != ENOSYS)
      fail<IoError>("{}: cannot rename {} to it: {}", name, partial_path_.string(), std::strerror(errno));
  }
  if (status != 0 && ::rename(partial_path_.c_str(), final_path_.c_str()) != 0)
    fail<IoError>("{}: cannot rename {} to it: {}", name, partial_path_.string(), std::strerror(errno));
  fsync_path(directory_of(final_path_), true);
  committed_ = true;
  release();
}

}  // namespace ckv
