// The CUDA backend's worker (docs/schedule.md, "Transfers"; docs/gpu.md): stage slots in device memory,
// compute on a stream of its own under LibTorch's stream guard, activation and gradient uploads on a
// high-priority stream, downloads on another, weight uploads in chunks on a low-priority stream fed one chunk
// at a time (device/copy_queue.h), each stream ordered after the compute submitted before the copy, tickets
// completed from the stream (cudaLaunchHostFunc) so no host thread polls. Torch-free header.
#pragma once

#include <memory>

#include "device/worker.h"

namespace rp::device::cuda {

// Throws SystemError naming the call and the device when the device cannot be used.
std::unique_ptr<Worker> makeCudaWorker(const WorkerOptions& options);

}  // namespace rp::device::cuda
