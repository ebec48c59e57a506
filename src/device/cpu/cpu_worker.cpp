#include "device/cpu/cpu_worker.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace rp::device {

CpuWorker::CpuWorker(const WorkerOptions& options) : chunkBytes_(std::max<std::size_t>(options.chunkBytes, 1)) {
  thread_ = std::thread([this] { loop(); });
}

CpuWorker::~CpuWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string CpuWorker::describe() const {
  return fmt::format("cpu (host memory; urgent copies inline, bulk copies on a copy thread in chunks of {:.1f} MB)",
                     static_cast<double>(chunkBytes_) / 1e6);
}

std::shared_ptr<void> CpuWorker::allocate(std::size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  void* memory = ::operator new(std::max<std::size_t>(bytes, 1), kAlign);
  std::memset(memory, 0, bytes);
  return std::shared_ptr<void>(memory, [](void* p) { ::operator delete(p, kAlign); });
}

void CpuWorker::enqueue(Item item) {
  item.ticket.add();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bulk_.push_back(std::move(item));
  }
  cv_.notify_all();
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
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  for (std::size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += chunkBytes_) {
    enqueue({d + off, s + off, std::min(chunkBytes_, bytes - off), ticket});
    if (bytes == 0) break;
  }
}

void CpuWorker::loop() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !bulk_.empty(); });
      if (bulk_.empty()) return;  // stop requested and drained
      item = std::move(bulk_.front());
      bulk_.pop_front();
    }
    std::exception_ptr error;
    try {
      if (observer_) observer_(false, item.bytes);
      if (item.bytes > 0) std::memcpy(item.dst, item.src, item.bytes);
    } catch (...) {
      error = std::current_exception();
    }
    item.ticket.complete(error);
  }
}

}  // namespace rp::device
