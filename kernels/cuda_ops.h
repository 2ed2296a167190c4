#pragma once
// Host-side launch API of the CUDA kernels. No CUDA types appear here, so lib/ and apps/
// include it in builds without nvcc; there available() is false.
namespace ckv::cuda {

// True when ckv was built with CUDA and a device is present.
bool available();

}  // namespace ckv::cuda
