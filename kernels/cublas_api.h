#pragma once
// cuBLAS, loaded on first use with dlopen rather than linked: a CUDA build that runs on the
// CPU (every run today, and any machine without a GPU) would otherwise map libcublas and
// libcublasLt at program start, +216 MiB of RSS and +0.1 s on every `ckv` command
// (docs/PERF.md, "cuBLAS loaded on first use"). Only .cu files include this header.
#include <cublas_v2.h>

namespace ckv::cuda::detail {

// The cuBLAS entry points ckv calls (the _v2 symbols that cublas_v2.h's macros name).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Loads libcublas.so.<major of the headers> once (the loader's search path, then the
// toolkit's library directory found at build time) and resolves every entry point; throws
// DeviceError naming the library or symbol that is missing. Thread-safe.
const CublasApi& cublas();

}  // namespace ckv::cuda::detail
