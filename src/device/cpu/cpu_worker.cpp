#include "device/cpu/cpu_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <thread>

#include <unistd.h>

#include <atomic>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"
#include "device/cpu/cpu_links.h"
#include "memory/shm_segment.h"

namespace rp::device {
namespace {

struct TimeMark : ComputeMark {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

// The CPU's hand-off ring: one shared-memory segment of `slots` slots. Copies are synchronous, so a write has
// landed when it returns and a read needs no event.
struct RingShape {
  std::string name;
  int slots = 0;
  std::size_t slotBytes = 0;
};

std::string encode(const RingShape& shape) {
  return fmt::format("{} {} {}", shape.name, shape.slots, shape.slotBytes);
}

RingShape decode(const std::string& handle) {
  RingShape shape;
  std::istringstream in(handle);
  in >> shape.name >> shape.slots >> shape.slotBytes;
  RP_CHECK(in && shape.slots > 0, "malformed CPU hand-off ring handle '{}'", handle);
  return shape;
}

std::size_t ringBytes(const RingShape& shape) {
  return static_cast<std::size_t>(shape.slots) * shape.slotBytes;
}

// Where `slot` starts in the ring's segment, for `bytes` of it.
std::uint8_t* slotAt(const memory::ShmSegment& segment, const RingShape& shape, int slot, std::size_t bytes) {
  RP_CHECK(slot >= 0 && slot < shape.slots && bytes <= shape.slotBytes,
           "hand-off slot {} of {} bytes in ring {} ({} slots of {} bytes)", slot, bytes, shape.name, shape.slots,
           shape.slotBytes);
  return segment.data() + static_cast<std::size_t>(slot) * shape.slotBytes;
}

class CpuRing : public HandoffRing {
 public:
  CpuRing(CpuWorker& worker, RingShape shape)
      : worker_(worker),
        shape_(std::move(shape)),
        segment_(memory::ShmSegment::create(shape_.name, ringBytes(shape_))) {}
  std::string handle() const override { return encode(shape_); }
  void write(int slot, const void* src, std::size_t bytes) override {
    worker_.copyUrgent(slotAt(segment_, shape_, slot, bytes), src, bytes).throwIfFailed();  // done: inline
  }
  void opened() override { segment_.unlink(); }

 private:
  CpuWorker& worker_;
  RingShape shape_;
  memory::ShmSegment segment_;
};

class CpuPeerRing : public PeerRing {
 public:
  CpuPeerRing(CpuWorker& worker, RingShape shape)
      : worker_(worker), shape_(std::move(shape)), segment_(memory::ShmSegment::open(shape_.name, ringBytes(shape_))) {}
  Ticket read(int slot, void* dst, std::size_t bytes) override {
    return worker_.copyUrgent(dst, slotAt(segment_, shape_, slot, bytes), bytes);
  }

 private:
  CpuWorker& worker_;
  RingShape shape_;
  memory::ShmSegment segment_;
};

}  // namespace

CpuWorker::CpuWorker(const WorkerOptions& options)
    : stretch_(1.0 / options.computeSpeed - 1.0),
      bulk_(options.chunkBytes, 1, [this](void* dst, const void* src, std::size_t bytes) {
        if (observer_) observer_(false, bytes);
        std::memcpy(dst, src, bytes);
        return ChunkedCopyQueue::Landing();  // landed
      }) {
  if (!(options.computeSpeed > 0 && options.computeSpeed <= 1)) {
    RP_THROW(InputError, "cpu worker: compute speed {} (RP_SLOW_WORKER) must be in (0, 1]", options.computeSpeed);
  }
}

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

// Note [Slow worker]: a worker slowed for testing (RP_SLOW_WORKER, docs/env.md) sleeps, at each mark, `stretch_`
// times the compute since the previous mark of the same compute scope. Every compute of a stage job lies
// between two marks (they time each layer), so the whole job runs at the given fraction of its pace, and the
// per-layer times the coordinator measures are the slowed ones, as on a slower card.
std::unique_ptr<ComputeScope> CpuWorker::enterCompute() {
  computedUntil_ = std::chrono::steady_clock::now();
  return std::make_unique<ComputeScope>();
}

// Compute is synchronous on the calling thread: a mark is the time it was taken.
std::shared_ptr<ComputeMark> CpuWorker::mark() {
  if (stretch_ > 0) {
    std::this_thread::sleep_for((std::chrono::steady_clock::now() - computedUntil_) * stretch_);
    computedUntil_ = std::chrono::steady_clock::now();
  }
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

void CpuWorker::copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes, std::shared_ptr<ComputeMark>) {
  bulk_.submit(ticket, dst, src, bytes);
}

// Named by process and a per-process count: threads as ranks share a process.
std::unique_ptr<HandoffRing> CpuWorker::shareRing(int slots, std::size_t slotBytes) {
  static std::atomic<int> rings{0};
  return std::make_unique<CpuRing>(
      *this, RingShape{fmt::format("/rp-ring-{}-{}", ::getpid(), rings++), slots, std::max<std::size_t>(slotBytes, 1)});
}

std::unique_ptr<PeerRing> CpuWorker::openRing(const std::string& handle) {
  return std::make_unique<CpuPeerRing>(*this, decode(handle));
}

std::string CpuWorker::linksId() {
  return cpuLinksId();
}

std::unique_ptr<PeerLinks> CpuWorker::joinLinks(const std::string& id, int rank, int ranks, int slots,
                                                std::size_t slotBytes) {
  return joinCpuLinks(id, rank, ranks, slots, slotBytes);
}

}  // namespace rp::device
