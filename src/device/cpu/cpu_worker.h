// The CPU backend's worker (docs/schedule.md, "Transfers"): its memory is host memory. Bulk copies (weight
// uploads, prefetch) run on a copy thread in chunks of at most `chunkBytes`, overlapping compute; urgent
// copies (activations, gradient downloads) run at once on the caller's thread, so they never wait behind a
// bulk chunk — the reference's rule that weight prefetch never delays critical-path activations, with no
// link to share.
// Thread-safety: submit from the worker's main thread; bulk copies run on the copy thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "device/worker.h"

namespace rp::device {

class CpuWorker : public Worker {
 public:
  explicit CpuWorker(const WorkerOptions& options);
  ~CpuWorker() override;
  CpuWorker(const CpuWorker&) = delete;
  CpuWorker& operator=(const CpuWorker&) = delete;

  std::string describe() const override;
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  std::unique_ptr<ComputeScope> enterCompute() override { return std::make_unique<ComputeScope>(); }
  Ticket computeDone() override { return Ticket(); }
  Ticket copyUrgent(void* dst, const void* src, std::size_t bytes) override;
  void copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes) override;

  // Test hook: every copy first calls this with (urgent, bytes).
  void setObserver(std::function<void(bool, std::size_t)> observer) { observer_ = std::move(observer); }

 private:
  struct Item {
    void* dst;
    const void* src;
    std::size_t bytes;
    Ticket ticket;
  };
  void loop();
  void enqueue(Item item);

  std::size_t chunkBytes_;
  std::function<void(bool, std::size_t)> observer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> bulk_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rp::device
