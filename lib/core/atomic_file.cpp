#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.h"

namespace ckv {
namespace fs = std::filesystem;

namespace {

bool exists_no_follow(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

// fsync of a file or directory by path; directories need O_RDONLY too.
void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
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

}  // namespace

fs::path AtomicOutput::partial_path_for(const fs::path& final_path) {
  std::string name(1, '.');
  name.append(final_path.filename().string()).append(".partial");
  return final_path.parent_path() / name;
}

AtomicOutput::AtomicOutput(fs::path final_path, AtomicOutputOptions options)
    : final_path_(std::move(final_path)), partial_path_(partial_path_for(final_path_)) {
  const std::string name = final_path_.string();
  if (final_path_.filename().empty())
    fail<InputError>("{}: output path names a directory, not a file", name);
  const fs::path dir =
      final_path_.parent_path().empty() ? fs::path(".") : final_path_.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail<IoError>("{}: output directory {} does not exist", name, dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail<IoError>("{}: output directory {} is not writable: {}", name, dir.string(),
                  std::strerror(errno));
  if (fs::is_directory(final_path_, ec)) fail<InputError>("{}: output path is a directory", name);

  const bool have_final = exists_no_follow(final_path_);
  const bool have_partial = exists_no_follow(partial_path_);
  if (options.force && !options.resume) {
    // Start over; the old final file stays until commit() renames over it.
    if (have_partial && !fs::remove(partial_path_, ec))
      fail<IoError>("{}: cannot remove stale partial file: {}", partial_path_.string(),
                    ec.message());
    return;
  }
  if (options.resume) {
    if (have_partial) {
      continuing_ = true;
    } else if (have_final) {
      // Continue a complete output (e.g. more records): it goes back to the partial name
      // so that the final name never holds a file being modified.
      fs::rename(final_path_, partial_path_, ec);
      if (ec)
        fail<IoError>("{}: cannot move to {} to resume: {}", name, partial_path_.string(),
                      ec.message());
      continuing_ = true;
    }
    return;
  }
  if (have_final)
    fail<InputError>("{}: output exists; use --force to overwrite it or --resume to continue it",
                     name);
  if (have_partial)
    fail<InputError>(
        "{}: an interrupted run left {}; use --resume to continue it or --force to start over",
        name, partial_path_.string());
}

void AtomicOutput::commit() {
  if (committed_) return;
  if (!exists_no_follow(partial_path_))
    fail<IoError>("{}: nothing to commit, {} was not written", final_path_.string(),
                  partial_path_.string());
  fsync_path(partial_path_, false);
  if (::rename(partial_path_.c_str(), final_path_.c_str()) != 0)
    fail<IoError>("{}: cannot rename {} to it: {}", final_path_.string(), partial_path_.string(),
                  std::strerror(errno));
  const fs::path dir =
      final_path_.parent_path().empty() ? fs::path(".") : final_path_.parent_path();
  fsync_path(dir, true);
  committed_ = true;
}

}  // namespace ckv
