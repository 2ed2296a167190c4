#include "ops/rope.h"

#include <cmath>

#include "core/error.h"
#include "ops/device_path.h"

namespace ckv {

RopeTable make_rope_table(std::span<const float> inv_freq, int64_t seq, float scale) {
  RopeTable t;
  t.seq = seq;
  t.half = static_cast<int64_t>(inv_freq.size());
  t.cos.resize(static_cast<size_t>(seq * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < t.half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      t.cos[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::cos(double{angle}));
      t.sin[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::sin(double{angle}));
      if (scale != 1.0f) {
        t.cos[static_cast<size_t>(p * t.half + i)] *= scale;
        t.sin[static_cast<size_t>(p * t.half + i)] *= scale;
      }
    }
  return t;
}

void apply_rope(ExecContext& ctx, Tensor& x, const RopeTable& table, int64_t first_position) {
  if (x.rank() != 3 || x.dim(2) < 2 * table.half || first_position < 0 ||
      first_position + x.dim(1) > table.seq)
    fail<InputError>("rope: tensor {} from position {} does not fit a table of {} positions, d_head {}",
                     x.shape_string(), first_position, table.seq, 2 * table.half);
  if (ctx.device() == Device::CUDA) {
    if (x.dim(2) != 2 * table.half)
      fail<UnsupportedError>("rope: partial rotary embedding ({} of {} dims) has no CUDA kernel", 2 * table.half,
                             x.dim(2));
    detail::apply_rope_cuda(ctx, x.data(), x.dim(0), x.dim(1), table, first_position);
    return;
  }
  detail::apply_rope_cpu(x.data(), x.dim(0), x.dim(1), table.half, table, first_position, ctx.pool(), x.dim(2));
}

}  // namespace ckv
