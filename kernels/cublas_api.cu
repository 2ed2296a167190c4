// dlopen of cuBLAS on first use (cublas_api.h says why).
#include <dlfcn.h>

#include <string>

#include "cublas_api.h"
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {
namespace detail {

namespace {

template <typename Fn>
void resolve(void* library, const char* symbol, const std::string& name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (fn == nullptr) raise_device_error("cuBLAS: " + name + " has no symbol " + symbol);
}

CublasApi load() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
#if defined(CKV_CUBLAS_DIR)
  if (library == nullptr)
    library = dlopen((std::string(CKV_CUBLAS_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (library == nullptr) {
    const char* why = dlerror();
    raise_device_error("cuBLAS: cannot load " + name + ": " + (why != nullptr ? why : "not found"));
  }
  CublasApi api;  // the library stays loaded for the life of the process
  resolve(library, "cublasCreate_v2", name, api.create);
  resolve(library, "cublasDestroy_v2", name, api.destroy);
  resolve(library, "cublasSetStream_v2", name, api.set_stream);
  resolve(library, "cublasSgemm_v2", name, api.sgemm);
  resolve(library, "cublasGetStatusString", name, api.status_string);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // a throw leaves it unset: the next call tries again
  return api;
}

}  // namespace detail

std::string cublas_check() {
  return detail::cublas().status_string(CUBLAS_STATUS_SUCCESS);
}

}  // namespace ckv::cuda
