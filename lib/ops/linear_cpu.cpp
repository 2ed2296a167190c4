#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/linear.h"

#if defined(CKV_HAVE_DNNL)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ckv {

std::string_view compute_dtype_name(ComputeDType dtype) {
  return dtype == ComputeDType::BF16 ? "bf16" : "f32";
}

#if defined(CKV_HAVE_DNNL)
bool compute_dtype_available(ComputeDType) {
  return true;
}
std::string_view gemm_engine_name() {
  return "onednn";
}

namespace {
std::optional<Bf16Kernel>& bf16_kernel_override() {
  static std::optional<Bf16Kernel> forced;
  return forced;
}
}  // namespace

// oneDNN's bf16 matmul runs on bf16 dot-product instructions (AVX512_BF16, AMX) where the
// CPU has them; elsewhere oneDNN emulates them, about 3x slower than its float32 sgemm
// (docs/PERF.md "--compute-dtype bf16 on a CPU without bf16 instructions"). There the same
// arithmetic -- x and W rounded to bf16, exact products (8 x 8 significant bits fit float32's
// 24), float32 sums -- is float32 sgemm over the rounded values.
Bf16Kernel bf16_kernel() {
  if (bf16_kernel_override()) return *bf16_kernel_override();
  static const Bf16Kernel kernel = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16 ? Bf16Kernel::NativeMatmul : Bf16Kernel::SgemmOnRoundedValues;
  }();
  return kernel;
}
std::string_view bf16_kernel_name(Bf16Kernel kernel) {
  return kernel == Bf16Kernel::NativeMatmul ? "onednn-bf16-matmul" : "onednn-sgemm-on-bf16-values";
}
namespace detail {
void force_bf16_kernel(std::optional<Bf16Kernel> kernel) {
  bf16_kernel_override() = kernel;
}
}  // namespace detail
#else
bool compute_dtype_available(ComputeDType dtype) {
  return dtype == ComputeDType::F32;
}
std::string_view gemm_engine_name() {
  return "eigen";
}
Bf16Kernel bf16_kernel() {
  return Bf16Kernel::None;
}
std::string_view bf16_kernel_name(Bf16Kernel) {
  return "none";
}
namespace detail {
void force_bf16_kernel(std::optional<Bf16Kernel>) {}
bool bf16_kernel_runs(Bf16Kernel) {
  return false;
}
}  // namespace detail
#endif

namespace detail {

// Output columns per task: about out/16, a multiple of 16, at least 32. It depends on the
// shape only, never on the thread count, so every column is computed by the same GEMM call
// whatever the pool size: results are bit-identical across --threads. Wide chunks keep the
// repeated packing of x (once per chunk) small next to the multiply; the cap keeps a
// converted tile (thread-local, [chunk, in] float32) within 16 MiB, which only narrows the
// lm_head of large vocabularies.
int64_t linear_column_chunk(int64_t out, int64_t in) {
  constexpr int64_t kTileBytes = int64_t{16} << 20;
  const int64_t per_task = (out + 15) / 16;
  const int64_t chunk = std::max<int64_t>(32, (per_task + 15) / 16 * 16);
  const int64_t cap = std::max<int64_t>(32, kTileBytes / (4 * std::max<int64_t>(1, in)) / 16 * 16);
  return std::min(chunk, cap);
}

void linear_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                float* y, int64_t y_stride, int64_t rows, ThreadPool& pool, ComputeDType compute) {
  // A float32 weight read in place gains nothing from the fused kernel: Eigen's product
  // streams it faster (bench/bench_linear.cpp, docs/PERF.md "Decode"). Decode-sized calls
  // take the fused float32 path under --compute-dtype bf16 too: a tile converted for a few
  // rows costs more than the product (a prefill's one-row lm_head converted Gemma 3's whole
  // 262K x 640 embedding; docs/PERF.md "--compute-dtype bf16").
  if (rows <= kLinearFewRows && w.f32_rows(0) == nullptr)
    linear_few_rows_cpu(x, x_stride, w, bias, y, y_stride, rows, pool);
  else
    linear_tiled_cpu(x, x_stride, w, bias, y, y_stride, rows, pool, compute);
}

namespace {

using Stride = Eigen::OuterStride<>;

#if defined(CKV_HAVE_DNNL)
// oneDNN (Debian's libdnnl, OpenMP runtime) as the engine of one column chunk. Every call
// runs on the calling pool thread alone: OpenMP's thread count is an ICV of each thread
// that is not itself an OpenMP thread, set to 1 here once per thread, so oneDNN opens no
// team and a chunk's product is the same single-threaded computation whatever --threads
// is (tests/test_linear_engine.cpp proves it bit for bit).
void single_threaded_omp() {
  thread_local const bool set = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)set;
}

// y [rows, width] (row stride y_stride) = x [rows, in] (row stride x_stride) tile^T, tile
// [width, in] row-major; oneDNN's sgemm is row-major.
void gemm_f32(const float* x, int64_t x_stride, const float* tile, int64_t width, int64_t in,
              float* y, int64_t y_stride, int64_t rows) {
  single_threaded_omp();
  const dnnl_status_t status =
      dnnl_sgemm('N', 'T', rows, width, in, 1.0f, x, x_stride, tile, in, 0.0f, y, y_stride);
  if (status != dnnl_success)
    fail<Error>("linear: oneDNN sgemm failed (status {})", static_cast<int>(status));
}

// The bf16 matmul primitives, one per shape (rows, in, width, y_stride), made once and
// shared by the pool's threads (executing a primitive is thread-safe; each thread brings
// its own stream and scratchpad). A run over many prompt lengths makes new shapes: past
// kMaxPrimitives the cache starts again (callers hold their primitive by shared_ptr).
struct Bf16Matmul {
  dnnl::matmul primitive;
  size_t scratch_bytes = 0;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::shared_ptr<const Bf16Matmul> bf16_matmul(int64_t rows, int64_t in, int64_t width,
                                              int64_t y_stride) {
  using dt = dnnl::memory::data_type;
  constexpr size_t kMaxPrimitives = 512;
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::shared_ptr<const Bf16Matmul>>
      cache;
  const std::lock_guard lock(mutex);
  if (cache.size() >= kMaxPrimitives && !cache.contains({rows, in, width, y_stride})) cache.clear();
  auto& slot = cache[{rows, in, width, y_stride}];
  if (!slot) {
    const dnnl::memory::desc src({rows, in}, dt::bf16, {in, 1});
    const dnnl::memory::desc weights({in, width}, dt::bf16,
                                     {1, in});  // the tile [width, in] as W^T
    const dnnl::memory::desc dst({rows, width}, dt::f32, {y_stride, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr,
                                          cpu_engine());
    slot = std::make_shared<const Bf16Matmul>(
        Bf16Matmul{dnnl::matmul(pd), pd.scratchpad_desc().get_size()});
  }
  return slot;
}

// y [rows, width] = x_bf16 [rows, in] (contiguous) tile_bf16^T, float32 accumulation.
void gemm_bf16(const Eigen::bfloat16* x, const Eigen::bfloat16* tile, int64_t width, int64_t in,
               float* y, int64_t y_stride, int64_t rows) {
  using dt = dnnl::memory::data_type;
  single_threaded_omp();
  const std::shared_ptr<const Bf16Matmul> held = bf16_matmul(rows, in, width, y_stride);
  const Bf16Matmul& mm = *held;
  thread_local dnnl::stream stream(cpu_engine());
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max<size_t>(1, mm.scratch_bytes));
  auto* xp = const_cast<Eigen::bfloat16*>(x);
  auto* tp = const_cast<Eigen::bfloat16*>(tile);
  const dnnl::memory src({{rows, in}, dt::bf16, {in, 1}}, cpu_engine(), xp);
  const dnnl::memory weights({{in, width}, dt::bf16, {1, in}}, cpu_engine(), tp);
  const dnnl::memory dst({{rows, width}, dt::f32, {y_stride, 1}}, cpu_engine(), y);
  const dnnl::memory pad({{static_cast<int64_t>(scratch.size())}, dt::u8, {1}}, cpu_engine(),
                         scratch.data());
  mm.primitive.execute(stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, weights},
                                {DNNL_ARG_DST, dst},
                                {DNNL_ARG_SCRATCHPAD, pad}});
  stream.wait();
}
#else
void gemm_f32(const float* x, int64_t x_stride, const float* tile, int64_t width, int64_t in,
              float* y, int64_t y_stride, int64_t rows) {
  const Eigen::Map<const RowMatrix, 0, Stride> input(x, rows, in, Stride(x_stride));
  const ConstMatrixMap w_chunk(tile, width, in);
  Eigen::Map<RowMatrix, 0, Stride> y_chunk(y, rows, width, Stride(y_stride));
  y_chunk.noalias() = input * w_chunk.transpose();
}
#endif

// The weight rows [begin, begin+width) as float32: in place for a float32 weight, else
// converted into thread-local scratch that grows to the widest tile and is reused.
const float* f32_tile(const WeightMatrix& w, int64_t begin, int64_t width) {
  if (const float* in_place = w.f32_rows(begin)) return in_place;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(width * w.cols()));
  w.rows_f32(begin, width, scratch.data());
  return scratch.data();
}

// The bits of x rounded to the nearest bfloat16 (ties to even), NaN as Eigen's quiet NaN of
// the same sign: the value Eigen's float -> bfloat16 cast gives. Branch-free, so the loops
// below vectorise (Eigen's cast is scalar here).
inline uint32_t bf16_rounded_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t nan = (u & 0x80000000u) | 0x7fc00000u;
  return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

// dst[i] = src[i] rounded to the nearest bfloat16, held as float32.
void round_to_bf16_values(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = bf16_rounded_bits(src[i]);
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

// dst[i] = src[i] rounded to the nearest bfloat16.
void round_to_bf16(const float* src, Eigen::bfloat16* dst, int64_t n) {
  static_assert(sizeof(Eigen::bfloat16) == sizeof(uint16_t));
  for (int64_t i = 0; i < n; ++i) {
    const auto bits = static_cast<uint16_t>(bf16_rounded_bits(src[i]) >> 16);
    std::memcpy(static_cast<void*>(dst + i), &bits, sizeof bits);
  }
}

void add_bias(const float* bias, float* y, int64_t y_stride, int64_t rows, int64_t width) {
  if (bias == nullptr) return;
  Eigen::Map<RowMatrix, 0, Stride> y_chunk(y, rows, width, Stride(y_stride));
  y_chunk.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, width);
}

}  // namespace

#if defined(CKV_HAVE_DNNL)
bool bf16_kernel_runs(Bf16Kernel kernel) {
  if (kernel == Bf16Kernel::SgemmOnRoundedValues) return true;
  if (kernel != Bf16Kernel::NativeMatmul) return false;
  static const bool native = [] {
    try {
      (void)bf16_matmul(1, 32, 32, 32);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}
#endif

void linear_f32_chunk_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
                          int64_t y_stride, int64_t rows, int64_t begin, int64_t chunk) {
  const int64_t width = std::min(chunk, w.rows() - begin);
  gemm_f32(x, x_stride, f32_tile(w, begin, width), width, w.cols(), y + begin, y_stride, rows);
  add_bias(bias == nullptr ? nullptr : bias + begin, y + begin, y_stride, rows, width);
}

void linear_batch_cpu(const float* x, int64_t x_stride, std::span<const LinearJob> jobs, int64_t rows,
                      ThreadPool& pool, ComputeDType compute) {
  if (!tiled_f32_for_any_weight(rows, compute)) {
    for (const LinearJob& j : jobs) linear_cpu(x, x_stride, *j.w, j.bias, j.y, j.y_stride, rows, pool, compute);
    return;
  }
  struct Task {
    const LinearJob* job;
    int64_t begin, chunk;
  };
  std::vector<Task> tasks;
  for (const LinearJob& j : jobs) {
    const int64_t chunk = linear_column_chunk(j.w->rows(), j.w->cols());
    for (int64_t begin = 0; begin < j.w->rows(); begin += chunk) tasks.push_back({&j, begin, chunk});
  }
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const Task& task = tasks[static_cast<size_t>(t)];
    const LinearJob& j = *task.job;
    linear_f32_chunk_cpu(x, x_stride, *j.w, j.bias, j.y, j.y_stride, rows, task.begin, task.chunk);
  });
}

void linear_tiled_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                      float* y, int64_t y_stride, int64_t rows, ThreadPool& pool,
                      ComputeDType compute) {
  const int64_t in = w.cols(), out = w.rows();
  const int64_t chunk = linear_column_chunk(out, in);
  const int64_t chunks = (out + chunk - 1) / chunk;
  if (compute == ComputeDType::F32) {
    pool.parallel_for(chunks, [&](int64_t c) { linear_f32_chunk_cpu(x, x_stride, w, bias, y, y_stride, rows, c * chunk, chunk); });
    return;
  }
#if defined(CKV_HAVE_DNNL)
  constexpr int64_t kRowsPerTask = 64;
  if (bf16_kernel() == Bf16Kernel::SgemmOnRoundedValues) {
    // The bf16 values held as float32: x rounded once per call, each tile per chunk.
    thread_local std::vector<float> x_rounded;  // the calling thread's, [rows, in]
    x_rounded.resize(static_cast<size_t>(rows * in));
    float* xr = x_rounded.data();
    pool.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t t) {
      const int64_t r0 = t * kRowsPerTask, n = std::min(kRowsPerTask, rows - r0);
      for (int64_t r = r0; r < r0 + n; ++r) round_to_bf16_values(x + r * x_stride, xr + r * in, in);
    });
    pool.parallel_for(chunks, [&](int64_t c) {
      const int64_t begin = c * chunk, width = std::min(chunk, out - begin);
      const float* tile = f32_tile(w, begin, width);
      thread_local std::vector<float> tile_rounded;
      tile_rounded.resize(static_cast<size_t>(width * in));
      round_to_bf16_values(tile, tile_rounded.data(), width * in);
      gemm_f32(xr, in, tile_rounded.data(), width, in, y + begin, y_stride, rows);
      add_bias(bias == nullptr ? nullptr : bias + begin, y + begin, y_stride, rows, width);
    });
    return;
  }
  // Native: x rounded to bf16 once per call (row blocks over the pool; each element's
  // rounding is the same whoever does it), then each chunk rounds its float32 tile and
  // multiplies.
  thread_local std::vector<Eigen::bfloat16> x_bf16;  // the calling thread's, [rows, in]
  x_bf16.resize(static_cast<size_t>(rows * in));
  Eigen::bfloat16* xb = x_bf16.data();
  pool.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t t) {
    const int64_t r0 = t * kRowsPerTask, n = std::min(kRowsPerTask, rows - r0);
    for (int64_t r = r0; r < r0 + n; ++r) round_to_bf16(x + r * x_stride, xb + r * in, in);
  });
  pool.parallel_for(chunks, [&](int64_t c) {
    const int64_t begin = c * chunk, width = std::min(chunk, out - begin);
    const float* tile = f32_tile(w, begin, width);
    thread_local std::vector<Eigen::bfloat16> tile_bf16;
    tile_bf16.resize(static_cast<size_t>(width * in));
    round_to_bf16(tile, tile_bf16.data(), width * in);
    gemm_bf16(xb, tile_bf16.data(), width, in, y + begin, y_stride, rows);
    add_bias(bias == nullptr ? nullptr : bias + begin, y + begin, y_stride, rows, width);
  });
#else
  fail<UsageError>(
      "--compute-dtype bf16: this build has no bf16 GEMM (built without oneDNN; "
      "install libdnnl-dev and rebuild)");
#endif
}

}  // namespace detail

}  // namespace ckv
