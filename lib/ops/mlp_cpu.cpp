#include <algorithm>

#include "core/thread_pool.h"
#include "ops/mlp.h"
#include "ops/packet.h"

namespace ckv::detail {

namespace {

// silu(g) * u = g / (1 + exp(-g)) * u (exp(-g) = inf for very negative g gives 0).
Packet silu(const Packet& g, const Packet& u) {
  return ei::pmul(ei::pdiv(g, ei::padd(ei::pset1<Packet>(1.0f), ei::pexp(ei::pnegate(g)))), u);
}

// gelu_tanh(g) * u = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u, as torch's
// gelu(approximate="tanh"), with Eigen's vectorised tanh.
Packet gelu_tanh(const Packet& g, const Packet& u) {
  const Packet k = ei::pset1<Packet>(0.7978845608028654f);  // sqrt(2/pi)
  const Packet c = ei::pset1<Packet>(0.044715f);
  const Packet inner = ei::pmul(k, ei::pmadd(ei::pmul(c, ei::pmul(g, g)), g, g));
  const Packet half_g = ei::pmul(ei::pset1<Packet>(0.5f), g);
  return ei::pmul(ei::pmul(half_g, ei::padd(ei::pset1<Packet>(1.0f), ei::ptanh(inner))), u);
}

// gate[i] <- f(gate[i], up[i]) for i < n, in vectors of kLanes read wherever the data
// lies; the last partial vector goes through a padded copy, so every element gets the same
// vector arithmetic whatever its address or its neighbours (the operations are lane-wise).
template <Packet (*F)(const Packet&, const Packet&)>
void gate_span(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    ei::pstoreu(gate + i, F(ei::ploadu<Packet>(gate + i), ei::ploadu<Packet>(up + i)));
  if (i < n) {
    float g[kLanes] = {}, u[kLanes] = {};
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    ei::pstoreu(g, F(ei::ploadu<Packet>(g), ei::ploadu<Packet>(u)));
    std::copy(g, g + (n - i), gate + i);
  }
}

void gate_span(GateActivation act, float* gate, const float* up, int64_t n) {
  if (act == GateActivation::GeluTanh)
    gate_span<gelu_tanh>(gate, up, n);
  else
    gate_span<silu>(gate, up, n);
}

void gate_mul_cpu(GateActivation act, float* gate, const float* up, int64_t n, ThreadPool& pool) {
  constexpr int64_t kChunk = 16384;  // elements per task
  pool.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    gate_span(act, gate + begin, up + begin, std::min(kChunk, n - begin));
  });
}

}  // namespace

void silu_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  gate_mul_cpu(GateActivation::Silu, gate, up, n, pool);
}

void gelu_tanh_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  gate_mul_cpu(GateActivation::GeluTanh, gate, up, n, pool);
}

void gate_up_silu_cpu(const float* x, int64_t x_stride, const WeightMatrix& w_gate, const WeightMatrix& w_up,
                      float* gate, float* up, int64_t rows, ThreadPool& pool, GateActivation act) {
  const int64_t d_ff = w_gate.rows();
  const int64_t chunk = linear_column_chunk(d_ff, w_gate.cols());
  pool.parallel_for((d_ff + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t begin = c * chunk, width = std::min(chunk, d_ff - begin);
    linear_f32_chunk_cpu(x, x_stride, w_gate, nullptr, gate, d_ff, rows, begin, chunk);
    linear_f32_chunk_cpu(x, x_stride, w_up, nullptr, up, d_ff, rows, begin, chunk);
    for (int64_t r = 0; r < rows; ++r) gate_span(act, gate + r * d_ff + begin, up + r * d_ff + begin, width);
  });
}

}  // namespace ckv::detail
