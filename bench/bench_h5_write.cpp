// The dump's write path alone (issue 3's write-rate goal, docs/PERF.md): writes the HDF5
// pattern of a 4096-token dump of the default model (30 layers; q [9, n, 64], k and v
// [3, n, 64], window attention [9, 56, n], nu_l1 and nu_l2 [9, n]; float16, one head per
// chunk, through ckv's h5 layer exactly as `ckv dump` does) from memory, then closes and
// fsyncs the file, and prints the seconds of each part and the bytes, as one JSON line.
// bench/bench_h5_write.sh runs it interleaved with `dd conv=fdatasync` of the same size.
//
//   ckv_bench_h5_write OUT.h5 [N]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "io/h5.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckv;
  if (argc < 2) {
    fmt::print(stderr, "usage: {} OUT.h5 [N]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t n_head = 9, n_kv_head = 3, d_head = 64, rows = 56, n_layer = 30;
  try {
    // Constant data: HDF5 does not look at values (no filters), so this times the path only.
    const std::vector<float> q(static_cast<size_t>(n_head * n * d_head), 0.25f);   // [n_head, seq, d_head]
    const std::vector<float> kv(static_cast<size_t>(n_kv_head * n * d_head), 0.5f);  // [n_kv_head, seq, d_head]
    const std::vector<float> attn(static_cast<size_t>(n_head * rows * n), 1e-3f);  // [n_head, rows, seq]
    const std::vector<float> nu(static_cast<size_t>(n_head * n), 1.5f);            // [n_head, seq]
    const double t0 = now();
    h5::File f = h5::File::create(path);
    auto put = [](h5::Group& g, const char* name, const std::vector<float>& x, const std::vector<int64_t>& shape) {
      h5::Dataset d = g.create_dataset(name, h5::DType::F16, shape, {.chunk = h5::chunk_by_first_dim(shape, 2)});
      const size_t per = x.size() / static_cast<size_t>(shape[0]);
      for (int64_t h = 0; h < shape[0]; ++h) d.write_index(h, x.data() + static_cast<size_t>(h) * per, per);
    };
    for (int64_t l = 0; l < n_layer; ++l) {
      h5::Group g = f.create_group(fmt::format("records/0/layers/{}", l));
      put(g, "q", q, {n_head, n, d_head});
      put(g, "k", kv, {n_kv_head, n, d_head});
      put(g, "v", kv, {n_kv_head, n, d_head});
      put(g, "attn", attn, {n_head, rows, n});
      put(g, "nu_l1", nu, {n_head, n});
      put(g, "nu_l2", nu, {n_head, n});
    }
    const double t1 = now();
    f.close();
    const double t2 = now();
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0 || ::fsync(fd) != 0) fail<IoError>("{}: cannot fsync", path);
    ::close(fd);
    const double t3 = now();
    const h5::WriteStats& s = h5::write_stats();
    fmt::print("{{\"create_and_write_s\": {:.4f}, \"close_s\": {:.4f}, \"fsync_s\": {:.4f}, "
               "\"h5dwrite_s\": {:.4f}, \"f16_convert_s\": {:.4f}, \"total_s\": {:.4f}, \"bytes\": {}}}\n",
               t1 - t0, t2 - t1, t3 - t2, s.write_seconds, s.convert_seconds, t3 - t0, s.bytes);
  } catch (const Error& e) {
    fmt::print(stderr, "ckv_bench_h5_write: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
