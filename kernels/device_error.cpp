// The one place the CUDA side throws the library's typed error (core/error.h), compiled by
// the host compiler.
#include "core/error.h"
#include "cuda_check.h"

namespace ckv::cuda::detail {

void raise_device_error(const std::string& message) { throw DeviceError(escape_control(message)); }

}  // namespace ckv::cuda::detail
