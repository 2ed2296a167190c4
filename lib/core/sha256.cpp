#include "core/sha256.h"

#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <openssl/evp.h>

#include "core/error.h"

namespace ckv {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(state_->ctx);
    state_->ctx = nullptr;
    fail<Error>("sha256: OpenSSL could not initialise a SHA-256 context");
  }
}

Sha256::~Sha256() {
  if (state_) EVP_MD_CTX_free(state_->ctx);
}

Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    if (state_) EVP_MD_CTX_free(state_->ctx);
    state_ = std::move(other.state_);
  }
  return *this;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  if (!state_ || state_->finished) fail<Error>("sha256: update after finish");
  if (bytes.empty()) return;
  if (EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size()) != 1)
    fail<Error>("sha256: OpenSSL digest update failed");
}

void Sha256::update(std::string_view bytes) {
  update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

Sha256Digest Sha256::finish() {
  if (!state_ || state_->finished) fail<Error>("sha256: finish called twice");
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(state_->ctx, digest.data(), &length) != 1 || length != digest.size())
    fail<Error>("sha256: OpenSSL digest final failed");
  state_->finished = true;
  return digest;
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(digest.size() * 2, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0x0F];
  }
  return out;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Sha256 hash;
  hash.update(bytes);
  return to_hex(hash.finish());
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hash;
  hash.update(bytes);
  return to_hex(hash.finish());
}

std::string sha256_file(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO is refused below instead of waited on (no effect on regular files).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail<IoError>("{}: cannot open for hashing: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail<InputError>("{}: not a regular file, cannot hash it", path.string());
  }
  // Sequential read-ahead; a plain read loop with 4 MiB blocks runs at the speed of the
  // digest itself and, unlike mmap, reports read errors as errors instead of SIGBUS.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<uint8_t> block(size_t{4} << 20);
  Sha256 hash;
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail<IoError>("{}: read failed while hashing: {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;
    hash.update(std::span<const uint8_t>(block.data(), static_cast<size_t>(n)));
  }
  ::close(fd);
  return to_hex(hash.finish());
}

std::string model_sha256(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return sha256_file(path);
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path))
    if (e.is_regular_file()) names.insert(e.path().filename().string());
  std::string manifest;
  for (const std::string& name : names) manifest += sha256_file(path / name) + "  " + name + "\n";
  return sha256_hex(manifest);
}

}  // namespace ckv
