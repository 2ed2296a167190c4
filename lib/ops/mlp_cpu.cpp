#include <Eigen/Core>
#include <algorithm>

#include "core/thread_pool.h"
#include "ops/mlp.h"

namespace ckv::detail {

void silu_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  namespace ei = Eigen::internal;
  using Packet = ei::packet_traits<float>::type;
  constexpr int64_t kLanes = sizeof(Packet) / sizeof(float);
  constexpr int64_t kChunk = 16384;  // elements per task, a multiple of kLanes
  // silu(g) * u = g / (1 + exp(-g)) * u (exp(-g) = inf for very negative g gives 0), in
  // vectors of kLanes read wherever the data lies; the last partial vector goes through a
  // padded copy, so every element gets the same vector arithmetic whatever its address.
  const auto silu = [](const Packet& g, const Packet& u) {
    return ei::pmul(ei::pdiv(g, ei::padd(ei::pset1<Packet>(1.0f), ei::pexp(ei::pnegate(g)))), u);
  };
  pool.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      ei::pstoreu(gate + i, silu(ei::ploadu<Packet>(gate + i), ei::ploadu<Packet>(up + i)));
    if (i < end) {
      float g[kLanes] = {}, u[kLanes] = {};
      std::copy(gate + i, gate + end, g);
      std::copy(up + i, up + end, u);
      ei::pstoreu(g, silu(ei::ploadu<Packet>(g), ei::ploadu<Packet>(u)));
      std::copy(g, g + (end - i), gate + i);
    }
  });
}

}  // namespace ckv::detail
