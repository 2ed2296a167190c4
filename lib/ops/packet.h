#pragma once
// The widest float vector of the build, through Eigen's packet primitives (16 floats with
// AVX-512, 8 with AVX, 4 with SSE): what the CPU kernels that are not GEMMs are written on
// (attention_cpu.cpp, mlp_cpu.cpp), so one source serves every instruction set.
#include <Eigen/Core>
#include <cstdint>

namespace ckv::detail {

namespace ei = Eigen::internal;
using Packet = ei::packet_traits<float>::type;
inline constexpr int64_t kLanes = sizeof(Packet) / sizeof(float);

// kLanes vectors, transposed in registers by ei::ptranspose. (GCC notes that a vector type's
// alignment attribute does not take part in the template argument; Eigen relies on that.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using LaneBlock = ei::PacketBlock<Packet, kLanes>;
#pragma GCC diagnostic pop

}  // namespace ckv::detail
