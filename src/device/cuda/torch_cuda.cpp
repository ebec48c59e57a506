// LibTorch's CUDA kernels, loaded at run time where a driver is (Note [LibTorch's CUDA kernels]).
#include <dlfcn.h>

#include <mutex>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>

#include "common/error.h"
#include "device/cuda/cuda_worker.h"

namespace rp::device::cuda {

// Note [LibTorch's CUDA kernels]
// The torch wheel's CUDA kernels live in libtorch_cuda.so, which pulls in cuBLAS, cuDNN, cuFFT and the rest.
// Linked into a program, it is loaded and its kernels registered in every process, ~0.3 s of CPU each on these
// machines (0.6 s for the whole of roundpipe_train's start, --help included), where no process of a host
// without an NVIDIA driver will ever run them. So no binary links it but the GPU tier's tests: a program that
// may run the CUDA backend calls loadTorchCuda() first, which loads it (RTLD_GLOBAL, found through the
// program's RUNPATH, as LibTorch's own directory is) where the driver's library, libcuda.so.1, loads, and
// otherwise leaves the process on the CPU, as the probe will too. First, because LibTorch decides once per
// process whether CUDA exists, at its first question (at::detail::getCUDAHooks, which torch::manual_seed
// asks): a process that asked before the kernels were loaded keeps CUDA disabled. torchCudaLoaded() asks the
// dispatcher whether a CUDA kernel is registered (aten::empty.memory_format), so it also holds in a program
// that links libtorch_cuda.so; the CUDA worker refuses to start without one.
bool torchCudaLoaded() {
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::empty", "memory_format"});
  return op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

bool loadTorchCuda(bool withoutDriver) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  if (torchCudaLoaded()) return true;
  if (!withoutDriver && dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) return false;
  if (dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    RP_THROW(SystemError, "the NVIDIA driver is installed but LibTorch's CUDA kernels did not load: {}",
             why != nullptr ? why : "dlopen(libtorch_cuda.so) failed");
  }
  RP_CHECK(torchCudaLoaded(), "libtorch_cuda.so loaded but registered no CUDA kernel for aten::empty");
  return true;
}

}  // namespace rp::device::cuda
