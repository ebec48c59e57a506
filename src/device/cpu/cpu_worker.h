// The CPU backend's worker (docs/schedule.md, "Transfers"): its memory is host memory. Bulk copies (weight
// uploads, prefetch) run on a copy thread in chunks of at most `chunkBytes`, overlapping compute; urgent
// copies (activations, gradient downloads) run at once on the caller's thread, so they never wait behind a
// bulk chunk — the reference's rule that weight prefetch never delays critical-path activations, with no
// link to share.
// Thread-safety: submit from the worker's main thread; bulk copies run on the copy thread.
// (The queue's chunking and ordering is device/copy_queue.h, shared with the CUDA backend.)
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

#include "device/copy_queue.h"
#include "device/worker.h"

namespace rp::device {

class CpuWorker : public Worker {
 public:
  explicit CpuWorker(const WorkerOptions& options);
  ~CpuWorker() override;
  std::string describe() const override;
  Placement placement() const override { return {}; }
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  std::unique_ptr<ComputeScope> enterCompute() override;
  // Urgent copies, ring reads and link receives are done when they return; a ticket still pending (none here
  // today) is waited for, as the compute on this thread must.
  void computeAfter(const Ticket& ticket) override {
    if (!ticket.done()) ticket.wait();
    ticket.throwIfFailed();
  }
  std::shared_ptr<ComputeMark> mark() override;
  double elapsedMs(const ComputeMark& from, const ComputeMark& to) override;
  std::shared_ptr<void> pinHost(void*, std::size_t, const std::string&) override { return nullptr; }
  std::size_t freeMemory() override { return 0; }
  std::size_t takePeakComputeBytes() override { return 0; }
  void capComputeMemory(std::size_t) override {}
  Ticket copyUrgent(void* dst, const void* src, std::size_t bytes) override;
  // The compute before any mark has run: the same as copyUrgent.
  Ticket copyUrgentAfter(void* dst, const void* src, std::size_t bytes, const ComputeMark&) override {
    return copyUrgent(dst, src, bytes);
  }
  // The compute before any mark has run: `after` orders nothing here.
  void copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                std::shared_ptr<ComputeMark> after) override;
  std::unique_ptr<HandoffRing> shareRing(int slots, std::size_t slotBytes) override;
  std::unique_ptr<PeerRing> openRing(const std::string& handle) override;
  std::string linksId() override;
  std::unique_ptr<PeerLinks> joinLinks(const std::string& id, int rank, int ranks, int slots,
                                       std::size_t slotBytes) override;

  // Test hook: every copy first calls this with (urgent, bytes).
  void setObserver(std::function<void(bool, std::size_t)> observer) { observer_ = std::move(observer); }

 private:
  std::function<void(bool, std::size_t)> observer_;
  // Note [Slow worker]: (1 / computeSpeed) - 1, and the end of the compute the last mark took in (or the start
  // of the compute scope).
  double stretch_ = 0;
  std::chrono::steady_clock::time_point computedUntil_;
  ChunkedCopyQueue bulk_;  // last: its thread calls observer_
};

}  // namespace rp::device
