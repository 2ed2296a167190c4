// The per-device context (stream, cuBLAS handle, workspace, resident weights), device
// memory, copies and error reporting. Host code only: no kernels here.
#include <algorithm>
#include <string>
#include <vector>

#include "cublas_api.h"
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

bool available() {
  int count = 0;
  // No driver or no device is not an error here: it means "no CUDA device to offer".
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

DeviceContext::DeviceContext(int device_index) : device(device_index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    detail::raise_device_error("CUDA: no CUDA device found (the driver reports none)");
  if (device_index < 0 || device_index >= count)
    detail::raise_device_error("CUDA: no device cuda:" + std::to_string(device_index) + " (" +
                               std::to_string(count) + " present)");
  CKV_CUDA_CHECK(cudaSetDevice(device_index));
  CKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cublasStatus_t status = detail::cublas().create(&blas);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    detail::throw_cublas_error(status, "cublasCreate(&blas)", __FILE__, __LINE__);
  }
  const cublasStatus_t bound = detail::cublas().set_stream(blas, stream);
  if (bound != CUBLAS_STATUS_SUCCESS) {  // the destructor does not run for a throwing constructor
    detail::cublas().destroy(blas);
    cudaStreamDestroy(stream);
    detail::throw_cublas_error(bound, "cublasSetStream(blas, stream)", __FILE__, __LINE__);
  }
}

DeviceContext::~DeviceContext() {
  // Destructors report nothing: pending work is waited for, then everything is freed.
  cudaSetDevice(device);
  cudaStreamSynchronize(stream);
  weights.clear();
  vectors.clear();
  for (auto& buffer : workspace) buffer.reset();
  detail::cublas().destroy(blas);
  cudaStreamDestroy(stream);
}

DeviceContext* create_context(int device_index) {
  return new DeviceContext(device_index);
}

void destroy_context(DeviceContext* context) noexcept {
  delete context;
}

void* stream(DeviceContext& context) {
  return context.stream;
}

void synchronize(DeviceContext& context) {
  CKV_CUDA_CHECK(cudaStreamSynchronize(context.stream));
}

float* workspace(DeviceContext& context, int slot, size_t floats) {
  if (slot < 0 || slot >= kWorkspaceSlots)
    detail::raise_device_error("CUDA: workspace slot " + std::to_string(slot) + " out of range");
  auto& buffer = context.workspace[static_cast<size_t>(slot)];
  const size_t bytes = floats * sizeof(float);
  if (!buffer || buffer->bytes() < bytes) {
    if (buffer) CKV_CUDA_CHECK(cudaStreamSynchronize(context.stream));  // work may still read it
    buffer.reset();
    buffer = std::make_unique<detail::DeviceBuffer>(bytes);
  }
  return static_cast<float*>(buffer->get());
}

void copy_to_device(DeviceContext& context, void* device, const void* host, size_t bytes) {
  if (bytes > 0)
    CKV_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.stream));
}

void copy_to_host(DeviceContext& context, void* host, const void* device, size_t bytes) {
  if (bytes > 0)
    CKV_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, context.stream));
}

const DeviceWeight* find_weight(DeviceContext& context, const void* key) {
  const auto it = context.weights.find(key);
  return it == context.weights.end() ? nullptr : &it->second.weight;
}

const DeviceWeight& upload_weight(DeviceContext& context, const void* key, DType dtype,
                                  int64_t rows, int64_t cols, int64_t row_bytes,
                                  const uint8_t* const* host_rows) {
  if (const DeviceWeight* known = find_weight(context, key)) {
    if (known->dtype == dtype && known->rows == rows && known->cols == cols &&
        known->row_bytes == row_bytes)
      return *known;
    context.weights.erase(key);  // the host storage now holds another weight
  }
  if (rows <= 0 || cols <= 0 || row_bytes <= 0)
    detail::raise_device_error("CUDA: weight of shape [" + std::to_string(rows) + ", " +
                               std::to_string(cols) + "] cannot be uploaded");
  DeviceContext::Resident resident;
  const auto total = static_cast<size_t>(rows) * static_cast<size_t>(row_bytes);
  resident.bytes = std::make_unique<detail::DeviceBuffer>(total);
  auto* base = static_cast<uint8_t*>(resident.bytes->get());
  // Rows in HF order, staged through one host buffer of at most 64 MiB at a time.
  const int64_t rows_per_copy = std::max<int64_t>(1, (int64_t{64} << 20) / row_bytes);
  std::vector<uint8_t> staging(static_cast<size_t>(std::min(rows, rows_per_copy) * row_bytes));
  for (int64_t begin = 0; begin < rows; begin += rows_per_copy) {
    const int64_t count = std::min(rows_per_copy, rows - begin);
    for (int64_t r = 0; r < count; ++r)
      std::copy_n(host_rows[begin + r], row_bytes, staging.data() + r * row_bytes);
    CKV_CUDA_CHECK(cudaMemcpyAsync(base + begin * row_bytes, staging.data(),
                                   static_cast<size_t>(count * row_bytes), cudaMemcpyHostToDevice,
                                   context.stream));
    CKV_CUDA_CHECK(cudaStreamSynchronize(context.stream));  // before staging is reused
  }
  resident.weight = {dtype, rows, cols, row_bytes, base};
  return context.weights.emplace(key, std::move(resident)).first->second.weight;
}

const float* device_vector(DeviceContext& context, const float* host, int64_t n) {
  auto& resident = context.vectors[host];
  if (!resident.values || resident.n != n) {
    resident.values.reset();
    resident.values =
        std::make_unique<detail::DeviceBuffer>(static_cast<size_t>(n) * sizeof(float));
    resident.n = n;
    // Synchronous: work already on the stream may not read a vector it does not know.
    CKV_CUDA_CHECK(cudaMemcpy(resident.values->get(), host, static_cast<size_t>(n) * sizeof(float),
                              cudaMemcpyHostToDevice));
  }
  return static_cast<const float*>(resident.values->get());
}

namespace detail {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  raise_device_error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(status) +
                     " (" + file + ":" + std::to_string(line) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  raise_device_error(std::string("cuBLAS: ") + call + " failed: " + cublas().status_string(status) +
                     " (" + file + ":" + std::to_string(line) + ")");
}

unsigned grid_size(int64_t blocks, const char* kernel) {
  if (blocks < 0 || blocks > 0x7fffffff)
    raise_device_error(std::string("CUDA: ") + kernel + ": " + std::to_string(blocks) +
                       " blocks exceed the grid");
  return static_cast<unsigned>(blocks);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&ptr_, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    raise_device_error("CUDA: out of device memory: " + std::to_string(bytes) + " bytes asked, " +
                       std::to_string(free) + " of " + std::to_string(total) + " free (" +
                       cudaGetErrorString(status) + ")");
  }
  if (status != cudaSuccess) throw_cuda_error(status, "cudaMalloc", __FILE__, __LINE__);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

}  // namespace detail
}  // namespace ckv::cuda
