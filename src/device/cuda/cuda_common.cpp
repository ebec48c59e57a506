#include "device/cuda/cuda_common.h"

#include "common/error.h"

namespace rp::device::cuda {

void check(cudaError_t err, const char* call, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  RP_THROW(SystemError, "{} on CUDA device {} returned {} ({}: {})", call, device, static_cast<int>(err),
           cudaGetErrorName(err), cudaGetErrorString(err));
}

// The callback runs on a CUDA runtime thread and only touches the ticket's mutex.
void completeWhenReached(cudaStream_t stream, const Ticket& ticket, int device) {
  // A device fault stops the stream's callbacks: a waiter then learns it from the stream, not by hanging.
  ticket.setHealthCheck([stream, device] {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err != cudaSuccess && err != cudaErrorNotReady)
      check(err, "cudaStreamQuery (a copy or compute in flight)", device);
  });
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
