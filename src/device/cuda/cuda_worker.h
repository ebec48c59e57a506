// The CUDA backend's worker (docs/schedule.md, "Transfers"; docs/gpu.md): stage slots in device memory,
// compute on a stream of its own under LibTorch's stream guard, activation and gradient uploads on a stream of
// their own, downloads on another, weight uploads in chunks on a fourth, fed by a copy thread with at most two
// chunks in flight (device/copy_queue.h, Note [Chunks in flight]) — which, not stream priority, is what lets an
// activation upload go ahead of the weights: CUDA's stream priorities order kernels only and have no effect on
// copies between host and device. Each stream is ordered after the compute submitted before the copy; tickets
// complete from the stream (cudaLaunchHostFunc) so no host thread polls, and every host wait blocks instead of
// spinning (Note [Blocking host waits], cuda_common.cpp). Torch-free header.
#pragma once

#include <memory>

#include "device/worker.h"

namespace rp::device::cuda {

// Throws SystemError naming the call and the device when the device cannot be used, or where LibTorch's CUDA
// kernels are not loaded (loadTorchCuda).
std::unique_ptr<Worker> makeCudaWorker(const WorkerOptions& options);

// LibTorch's CUDA kernels (torch_cuda.cpp, Note [LibTorch's CUDA kernels]): whether they are registered, and
// loading them where the driver's library loads (anywhere with `withoutDriver`, for the tests). Returns whether
// they are loaded; throws SystemError where the driver is but they do not load.
bool torchCudaLoaded();
bool loadTorchCuda(bool withoutDriver);

}  // namespace rp::device::cuda
