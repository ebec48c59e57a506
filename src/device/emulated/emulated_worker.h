// The emulated backend's worker (docs/emulated.md): a GPU that costs the host no core and takes the time a named
// GPU would, so the host side — the engine, the node store, the optimizer, the coordinator, the tensor plane,
// MPI, checkpoints, traces — runs for real, at the model's real size, against it. Only the device is modelled
// (Note [Emulated device]): its compute from the FLOPs the engine says it submits (expectCompute), its host link
// per direction from the bytes of each copy, its memory accounted rather than allocated. Its tensors are
// LibTorch meta tensors: the ops run on shapes only, so what would be read back (losses) is synthetic, and the
// run says so everywhere.
// Thread-safety: submissions from the rank's main thread (expectCompute and mark() also from autograd hooks on
// it); tickets complete on the worker's own threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device/copy_queue.h"
#include "device/worker.h"

namespace rp::device::emulated {

using Clock = std::chrono::steady_clock;

// One direction of the host link: the intervals it is reserved for, each copy the earliest gap of its length
// from when it is ready (an urgent copy may go ahead of bulk chunks that still wait for their compute, since at
// most two chunks are queued at a time; it waits for the chunks already on the link).
class Link {
 public:
  explicit Link(double bytesPerSecond) : bytesPerSecond_(bytesPerSecond) {}
  // Reserves `bytes` at the earliest start >= `ready` that overlaps no other reservation: [start, end), at the
  // link's rate or at `rate` bytes/s where given (a pageable copy's).
  std::pair<Clock::time_point, Clock::time_point> reserve(Clock::time_point ready, std::size_t bytes,
                                                          double rate = 0);
  Clock::duration duration(std::size_t bytes, double rate = 0) const;

 private:
  double bytesPerSecond_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> busy_;  // by start; those past are dropped
};

class EmulatedWorker : public Worker {
 public:
  explicit EmulatedWorker(const WorkerOptions& options);
  ~EmulatedWorker() override;
  std::string describe() const override;
  Placement placement() const override;
  // Address space reserved without access (any touch faults), counted against the profile's memory.
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  std::unique_ptr<ComputeScope> enterCompute() override { return std::make_unique<ComputeScope>(); }
  void computeAfter(const Ticket& ticket) override;
  std::shared_ptr<ComputeMark> mark() override;
  double elapsedMs(const ComputeMark& from, const ComputeMark& to) override;
  // Registers a host range: a copy's side inside one is host memory, any other side device memory.
  std::shared_ptr<void> pinHost(void* memory, std::size_t bytes, const std::string& what) override;
  std::size_t freeMemory() override;
  // Note [Emulated compute memory]: what the meta tensors hold, counted by the engine's meta allocator.
  std::size_t takePeakComputeBytes() override;
  void capComputeMemory(std::size_t bytes) override { computeCap_ = bytes; }
  bool holdCompute(std::size_t bytes) override;
  void releaseCompute(std::size_t bytes) override { computeHeld_ -= bytes; }
  Ticket copyUrgent(void* dst, const void* src, std::size_t bytes) override;
  Ticket copyUrgentAfter(void* dst, const void* src, std::size_t bytes, const ComputeMark& after) override;
  void copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                std::shared_ptr<ComputeMark> after) override;
  std::unique_ptr<HandoffRing> shareRing(int slots, std::size_t slotBytes) override;
  std::unique_ptr<PeerRing> openRing(const std::string& handle) override;
  std::string linksId() override;
  std::unique_ptr<PeerLinks> joinLinks(const std::string& id, int rank, int ranks, int slots,
                                       std::size_t slotBytes) override;
  bool modelsCompute() const override { return true; }
  void expectCompute(const ComputeWork& work) override;
  std::vector<DeviceSpan> takeDeviceSpans() override;
  // Note [Device sanitizer]
  bool sanitizes() const override { return true; }
  void declareCompute(const Access& access) override;
  void declareCopy(const Access& access) override;
  void checkAccesses() override;

 private:
  class Completions;
  // The host ranges pinHost registered (start -> bytes), shared with the handles it returned: a handle may
  // outlive the worker (the node store's is released after it).
  struct HostRanges {
    std::mutex mutex;
    std::map<std::uintptr_t, std::pair<std::size_t, bool>> ranges;  // start -> bytes, pinned
  };
  // Where a copy's side is: device memory, or a registered host range, pinned or pageable.
  enum class Side { kDevice, kPinned, kPageable };
  Side sideOf(const void* p, std::size_t bytes) const;
  bool isHost(const void* p, std::size_t bytes) const { return sideOf(p, bytes) != Side::kDevice; }
  // Until `t`: asleep, or spinning where the profile's waits spin (Note [What a GPU host pays]).
  void waitUntil(Clock::time_point t) const;
  // A pageable copy's host side staged by the issuing thread, as the driver's staging does: an upload waits for
  // its stream to reach it and reads its source; a download waits until it landed and writes its destination.
  void stage(void* dst, const void* src, std::size_t bytes, bool upload, Clock::time_point start,
             Clock::time_point landed) const;
  // A copy ready at `ready` (its compute dependency), on the link its direction takes; completes `ticket`.
  Ticket urgent(void* dst, const void* src, std::size_t bytes, Clock::time_point ready);
  // The host memory a DMA of the copy would read or write (hostTraffic).
  void touchHost(void* dst, const void* src, std::size_t bytes, bool upload) const;

  // Note [Device sanitizer]: an operation on the device's timeline (a copy's start is its ordered one: when its
  // dependencies let it start, not when the link happened to be free), and each region's latest-ending writer
  // and reader.
  struct Op {
    Clock::time_point start, end;
    bool copy = false;
    std::string what;
    std::optional<Ticket> landing;  // a bulk copy's: its end is the queue thread's, known by its ticket
  };
  struct History {
    std::optional<Op> write, read;
  };
  void check(const Op& earlier, const Op& later, const Region& region, const char* headline);  // under mutex_
  std::string describe(const Region& region) const;
  double at(Clock::time_point t) const;  // ms since the worker began, for messages

  const EmulatedDevice device_;
  const int index_;
  mutable std::mutex mutex_;  // everything below but the queues
  Clock::time_point computeEnd_;  // when the compute submitted so far ends
  std::vector<DeviceSpan> spans_;
  // Bytes allocate() handed out, shared with their holders (a stage slot's tensors may outlive the worker).
  const std::shared_ptr<std::atomic<std::size_t>> allocated_ = std::make_shared<std::atomic<std::size_t>>(0);
  const std::shared_ptr<HostRanges> host_ = std::make_shared<HostRanges>();
  std::atomic<std::size_t> computeHeld_{0}, computePeak_{0}, computeCap_{0};  // cap 0: the card's memory
  Link up_, down_;
  Clock::time_point uploadStreamEnd_, downloadStreamEnd_;  // the last urgent copy's landing, per direction
  const Clock::time_point origin_ = Clock::now();
  Op lastCompute_, lastCopy_;  // the last submitted, for declareCompute / declareCopy
  std::uint64_t copies_ = 0, declaredCopies_ = 0;
  bool computeDeclared_ = true;
  std::map<Region, History> regions_;
  std::string violation_;  // the first one found
  int violations_ = 0;
  Clock::time_point bulkReady_;  // the bulk queue's order: a chunk starts after the one before and its `after`
  std::unique_ptr<Completions> completions_;
  ChunkedCopyQueue bulk_;  // last: its thread reserves the up link
};

}  // namespace rp::device::emulated
