#include "device/cpu/cpu_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace rp::device {
namespace {

struct TimeMark : ComputeMark {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

}  // namespace

CpuWorker::CpuWorker(const WorkerOptions& options)
    : bulk_(options.chunkBytes, [this](void* dst, const void* src, std::size_t bytes) {
        if (observer_) observer_(false, bytes);
        std::memcpy(dst, src, bytes);
      }) {}

CpuWorker::~CpuWorker() = default;

std::string CpuWorker::describe() const {
  return fmt::format("cpu (host memory; urgent copies inline, bulk copies on a copy thread in chunks of {:.1f} MB)",
                     static_cast<double>(bulk_.chunkBytes()) / 1e6);
}

std::shared_ptr<void> CpuWorker::allocate(std::size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  void* memory = ::operator new(std::max<std::size_t>(bytes, 1), kAlign);
  std::memset(memory, 0, bytes);
  return std::shared_ptr<void>(memory, [](void* p) { ::operator delete(p, kAlign); });
}

// Compute is synchronous on the calling thread: a mark is the time it was taken.
std::shared_ptr<ComputeMark> CpuWorker::mark() {
  return std::make_shared<TimeMark>();
}

double CpuWorker::elapsedMs(const ComputeMark& from, const ComputeMark& to) {
  return std::chrono::duration<double, std::milli>(static_cast<const TimeMark&>(to).at -
                                                   static_cast<const TimeMark&>(from).at)
      .count();
}

// Host memory has no link to share: an urgent copy runs at once on the caller's thread, so it never waits
// behind a bulk chunk (nor for a hop to the copy thread).
Ticket CpuWorker::copyUrgent(void* dst, const void* src, std::size_t bytes) {
  Ticket t;
  t.add();
  std::exception_ptr error;
  try {
    if (observer_) observer_(true, bytes);
    if (bytes > 0) std::memcpy(dst, src, bytes);
  } catch (...) {
    error = std::current_exception();
  }
  t.complete(error);
  return t;
}

void CpuWorker::copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes) {
  bulk_.submit(ticket, dst, src, bytes);
}

}  // namespace rp::device
