// y = x W^T through cuBLAS SGEMM. cuBLAS is column-major: a row-major [rows, out] y is a
// column-major [out, rows] matrix, y^T = W x^T, i.e. gemm(op(W)=T on the column-major
// [in, out] view of W, x^T as the column-major [in, rows] view of x).
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

void linear(const float* x_host, const float* w_host, float* y_host, int64_t rows, int64_t in,
            int64_t out) {
  if (rows <= 0 || in <= 0 || out <= 0 || rows > 0x7fffffff || in > 0x7fffffff || out > 0x7fffffff)
    detail::raise_device_error("cuda::linear: bad shape");
  const auto r = static_cast<int>(rows), k = static_cast<int>(in), n = static_cast<int>(out);
  detail::DeviceBuffer x(static_cast<size_t>(rows * in)), w(static_cast<size_t>(out * in)),
      y(static_cast<size_t>(rows * out));
  x.upload(x_host, static_cast<size_t>(rows * in));
  w.upload(w_host, static_cast<size_t>(out * in));
  const float one = 1.0f, zero = 0.0f;
  // Result [out, rows] column-major (= y row-major): W^T(col-major [in,out]) transposed.
  CKV_CUBLAS_CHECK(cublasSgemm(detail::cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, n, r, k, &one,
                               w.get(), k, x.get(), k, &zero, y.get(), n));
  CKV_CUDA_CHECK(cudaDeviceSynchronize());
  y.download(y_host, static_cast<size_t>(rows * out));
}

}  // namespace ckv::cuda
