#include "device/cuda/cuda_common.h"

#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace rp::device::cuda {

void check(cudaError_t err, const char* call, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  RP_THROW(SystemError, "{} on CUDA device {} returned {} ({}: {})", call, device, static_cast<int>(err),
           cudaGetErrorName(err), cudaGetErrorString(err));
}

// Note [Blocking host waits]: a host thread that waits for the device sleeps until the device gets there; it
// never spins. A spinning wait holds a whole core for as long as the device runs behind — the copy thread waits
// for every weight chunk to land (Note [Chunks in flight]), the issuing thread for the iteration's last compute
// mark and a fused job's losses — and it holds it at nice 0, ahead of the optimizer's threads at +10 (Note
// [Optimizer priority]), which are the ones that need the host's cores while the GPU computes. CUDA spins by
// default: cudaEventSynchronize busy-waits on an event made without cudaEventBlockingSync, and
// cudaStreamSynchronize, cudaDeviceSynchronize and the waits inside LibTorch (a copy into pageable host memory,
// .item()) follow the context's scheduling flags, whose default, cudaDeviceScheduleAuto, spins wherever the
// process has no more CUDA contexts than the machine has cores: always, for us. So:
// (1) every event a host thread waits on is made with cudaEventBlockingSync (kHostWaitEvent; a compute mark,
//     which is timed too, kTimedHostWaitEvent); events only streams wait on stay cudaEventDisableTiming alone;
// (2) the worker's own waits for a whole stream record such an event and wait on it (waitForStream), never
//     cudaStreamSynchronize;
// (3) when a worker is made, before its streams and its copy thread, blockHostWaits sets
//     cudaDeviceScheduleBlockingSync on the device's primary context, for the waits inside LibTorch, NCCL and
//     the driver. Current runtimes overwrite the flags of a context already made, as their documentation says
//     (LibTorch's, where it came first, as in tests that compute before they make a worker); old ones refused
//     with cudaErrorSetOnActiveProcess, and then the worker says so once and goes on: (1) and (2) hold anyway.
// A blocking wait wakes some microseconds later than a spinning one; every wait here is for milliseconds of
// device work. A ticket's waiter sleeps on a condition variable already (tickets complete from the stream,
// cudaLaunchHostFunc) and looks at the stream every 0.5 s with cudaStreamQuery, which returns at once.
std::string blockHostWaits(int device) {
  check(cudaSetDevice(device), "cudaSetDevice", device);
  unsigned int flags = 0;
  check(cudaGetDeviceFlags(&flags), "cudaGetDeviceFlags", device);
  if ((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync) return {};
  // The other flags kept; cudaDeviceMapHost is implicit in the runtime, and cudaSetDeviceFlags may refuse it.
  const unsigned int wanted = (flags & ~(cudaDeviceScheduleMask | cudaDeviceMapHost)) | cudaDeviceScheduleBlockingSync;
  const cudaError_t err = cudaSetDeviceFlags(wanted);
  if (err != cudaSuccess) {
    cudaGetLastError();  // cudaErrorSetOnActiveProcess is not sticky
    return fmt::format("cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) returned {} ({})", cudaGetErrorName(err),
                       cudaGetErrorString(err));
  }
  check(cudaGetDeviceFlags(&flags), "cudaGetDeviceFlags", device);
  if ((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync) return {};
  return fmt::format(
      "the context's scheduling flags are {:#x} after cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)",
      flags & cudaDeviceScheduleMask);
}

cudaError_t waitForStream(cudaStream_t stream) {
  cudaEvent_t reached = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&reached, kHostWaitEvent);
  if (err != cudaSuccess) return err;
  err = cudaEventRecord(reached, stream);
  if (err == cudaSuccess) err = cudaEventSynchronize(reached);
  cudaEventDestroy(reached);
  return err;
}

namespace {

// A ticket's last holder may be the stream callback below, where no CUDA call may be made: its events are
// retired here and destroyed by the next completeWhenReached, on a thread that submits work.
std::mutex gRetiredMutex;
std::vector<cudaEvent_t> gRetired;

void destroyRetiredEvents() {
  std::vector<cudaEvent_t> retired;
  {
    std::lock_guard<std::mutex> lock(gRetiredMutex);
    retired.swap(gRetired);
  }
  for (cudaEvent_t event : retired) cudaEventDestroy(event);
}

}  // namespace

// The callback runs on a CUDA runtime thread and only touches the ticket's mutex (and the retired events').
void completeWhenReached(cudaStream_t stream, const Ticket& ticket, int device) {
  destroyRetiredEvents();
  // A device fault stops the stream's callbacks: a waiter then learns it from the stream, not by hanging.
  ticket.setHealthCheck([stream, device] {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err != cudaSuccess && err != cudaErrorNotReady)
      check(err, "cudaStreamQuery (a copy or compute in flight)", device);
  });
  // What Worker::computeAfter makes the compute stream wait on instead of the host waiting for the ticket.
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, kStreamOrderEvent), "cudaEventCreate", device);
  ticket.addDeviceEvent(std::shared_ptr<void>(event, [](void* e) {
    std::lock_guard<std::mutex> lock(gRetiredMutex);
    gRetired.push_back(static_cast<cudaEvent_t>(e));
  }));
  check(cudaEventRecord(event, stream), "cudaEventRecord", device);
  ticket.add();
  auto* held = new Ticket(ticket);
  const cudaError_t err = cudaLaunchHostFunc(
      stream,
      [](void* p) {
        auto* t = static_cast<Ticket*>(p);
        t->complete();
        delete t;
      },
      held);
  if (err != cudaSuccess) {
    delete held;
    try {
      check(err, "cudaLaunchHostFunc", device);
    } catch (...) {
      ticket.complete(std::current_exception());
    }
  }
}

}  // namespace rp::device::cuda
