#include "device/cuda/cuda_probe.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace rp::device::cuda {
namespace {

__global__ void iotaScaled(float* out, int n, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale * static_cast<float>(i);
}

std::string describe(cudaError_t err, const char* call) {
  return std::string(call) + " returned " + std::to_string(static_cast<int>(err)) + " (" + cudaGetErrorName(err) +
         ": " + cudaGetErrorString(err) + ")";
}

}  // namespace

ProbeResult probeDevices() {
  ProbeResult result;
  int count = 0;  // cudaGetDeviceCount leaves it unwritten when there is no driver
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    result.error = describe(err, "cudaGetDeviceCount");
    cudaGetLastError();  // clear the sticky error
    return result;
  }
  result.count = count;
  if (count == 0) result.error = "cudaGetDeviceCount found 0 devices";
  return result;
}

std::string selfTest(int index) {
  constexpr int kN = 1000;
  constexpr float kScale = 0.5f;
  if (cudaError_t err = cudaSetDevice(index); err != cudaSuccess) return describe(err, "cudaSetDevice");
  float* device = nullptr;
  if (cudaError_t err = cudaMalloc(&device, kN * sizeof(float)); err != cudaSuccess) return describe(err, "cudaMalloc");
  iotaScaled<<<(kN + 255) / 256, 256>>>(device, kN, kScale);
  std::vector<float> host(kN, -1.0f);
  cudaError_t err = cudaMemcpy(host.data(), device, kN * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  if (err != cudaSuccess) return describe(err, "cudaMemcpy");
  for (int i = 0; i < kN; ++i) {
    if (host[i] != kScale * static_cast<float>(i)) {
      return "element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", expected " +
             std::to_string(kScale * static_cast<float>(i));
    }
  }
  return {};
}

}  // namespace rp::device::cuda
