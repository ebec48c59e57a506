// What the CUDA backend's files share (torch-free, internal to device/cuda/): error checks that name the call
// and the device, host waits that block (Note [Blocking host waits]), tickets completed from a stream, and the
// streams a worker's hand-off rings copy on.
#pragma once

#include <functional>
#include <string>

#include <cuda_runtime.h>

#include "device/worker.h"

namespace rp::device::cuda {

// Throws SystemError naming `call`, the device and the CUDA error (and clears a non-sticky one).
void check(cudaError_t err, const char* call, int device);

// Event flags by use (Note [Blocking host waits]). An event a host thread waits on (cudaEventSynchronize) blocks
// the thread instead of spinning; a compute mark is also timed (cudaEventElapsedTime); an event only streams wait
// on (cudaStreamWaitEvent) neither times nor blocks, the cheapest kind for that.
constexpr unsigned int kHostWaitEvent = cudaEventBlockingSync | cudaEventDisableTiming;
constexpr unsigned int kTimedHostWaitEvent = cudaEventBlockingSync;
constexpr unsigned int kStreamOrderEvent = cudaEventDisableTiming;

// Makes `device` current and sets its context to block the host's waits (cudaDeviceScheduleBlockingSync), for
// the waits inside LibTorch and the driver. Returns "" where that holds, else why not (the runtime refused to
// change a context already made): the worker's own waits block either way. Throws where the device is unusable.
std::string blockHostWaits(int device);

// Waits on the host, blocking, until `stream` has done what was submitted to it so far: an event with
// cudaEventBlockingSync recorded there, whatever the context's scheduling flags (cudaStreamSynchronize follows
// them). Never throws (destructors call it): the CUDA error, cudaSuccess when done.
cudaError_t waitForStream(cudaStream_t stream);

// Completes `ticket` once `stream` reaches this point, and attaches an event recorded there (computeAfter); a
// waiter learns of a device fault from the stream.
void completeWhenReached(cudaStream_t stream, const Ticket& ticket, int device);

// A worker's streams, as its hand-off rings see them.
struct RingStreams {
  int device = 0;
  cudaStream_t compute = nullptr;                  // writes: ordered after the compute that produced the tensor
  cudaStream_t upload = nullptr;                   // reads: the stream activation uploads use
  std::function<void(cudaStream_t)> afterCompute;  // makes a stream wait for the compute submitted so far
};

std::unique_ptr<HandoffRing> shareCudaRing(const RingStreams& streams, int slots, std::size_t slotBytes);
std::unique_ptr<PeerRing> openCudaRing(const RingStreams& streams, const std::string& handle);

// NCCL peer links (cuda_links.cpp); an InputError saying so where the build has no NCCL.
std::string cudaLinksId();
std::unique_ptr<PeerLinks> joinCudaLinks(const RingStreams& streams, const std::string& id, int rank, int ranks,
                                         int slots, std::size_t slotBytes);

}  // namespace rp::device::cuda
