#include "device/cuda/cuda_common.h"

#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace rp::device::cuda {

void check(cudaError_t err, const char* call, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  RP_THROW(SystemError, "{} on CUDA device {} returned {} ({}: {})", call, device, static_cast<int>(err),
           cudaGetErrorName(err), cudaGetErrorString(err));
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
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", device);
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
