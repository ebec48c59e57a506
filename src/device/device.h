// Which worker devices this process can use. Without a usable GPU the CPU backend is selected; that is
// a normal condition, reported with the reason (no CUDA build, no driver, no device).
#pragma once

#include <string>

namespace rp::device {

// kEmulated: a modelled GPU (device/emulated/: no compute, shapes only; docs/emulated.md).
enum class Backend { kCpu, kCuda, kEmulated };
// What a run asks for (pipeline.backend): auto = cuda where the probe found a GPU, else cpu; emulated is never
// chosen automatically.
enum class BackendChoice { kAuto, kCpu, kCuda, kEmulated };

struct Inventory {
  Backend backend = Backend::kCpu;
  int cudaDevices = 0;
  bool cudaCompiled = false;  // the binary contains the CUDA backend
  std::string reason;         // why this backend was chosen, for the one log line
};

// Probes once; cheap after the first call. Never throws for "no GPU".
Inventory probe();

// Loads LibTorch's CUDA kernels where an NVIDIA driver is installed (a no-op in a build without CUDA; Note
// [LibTorch's CUDA kernels], device/cuda/torch_cuda.cpp). A program that may run the CUDA backend calls it first
// in main, before any LibTorch call. Throws SystemError where the driver is but the kernels do not load.
void loadCudaKernels();

// Runs a tiny kernel on CUDA device `index` and checks its result (for the gpu test tier).
// Returns an empty string on success, otherwise what failed. Requires cudaCompiled.
std::string cudaSelfTest(int index);

const char* backendName(Backend backend);

// The dense bf16/fp16 tensor-core peak (TFLOP/s, fp32 accumulate) of a GPU by the name the CUDA runtime gives
// it, from the vendors' data sheets; 0 for a device not in the table (docs/metrics.md lists it).
double tensorPeakTflops(const std::string& deviceName);

}  // namespace rp::device
