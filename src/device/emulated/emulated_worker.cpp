#include "device/emulated/emulated_worker.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <queue>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/host_cpu.h"
#include "common/log.h"

namespace rp::device::emulated {

// Note [Emulated device]: the device is a clock, not a computer. Its compute stream is the time `computeEnd_`
// at which the compute submitted so far ends: each span the engine submits (expectCompute, before the LibTorch
// ops that make it, which run on meta tensors: shapes only) starts when the stream is free or now, whichever is
// later, and lasts FLOPs / the sustained rate + kernels x the per-kernel floor. A mark is the stream's end when
// it is taken; elapsedMs sleeps until the later mark is reached, as cudaEventSynchronize would. Copies reserve
// their link direction (the profile's rate for one GPU: pcie_gbps / gpus_per_host_bridge, as the simulator
// counts it) from the compute they follow, and their tickets complete when they land, on a thread of the
// worker's own, so every wait the engine makes takes the time it would take on the card and costs no core.
// A copy's host side is a range registered by pinHost (the node store, the tensor arena); the other side is
// device memory — a meta tensor's address or an allocate()d range, which is address space without access.
// The host's own work is all real: op dispatch, the engine's bookkeeping, the optimizer, the tensor plane.

namespace {

struct TimeMark : ComputeMark {
  explicit TimeMark(Clock::time_point t) : at(t) {}
  Clock::time_point at;
};

// RP_SLOW_WORKER slows an emulated device's compute as it slows a CPU worker's.
EmulatedDevice slowed(const WorkerOptions& options) {
  EmulatedDevice device = options.emulated;
  device.flopsPerSecond *= options.computeSpeed;
  return device;
}

// Reads `bytes` of host memory, as a copy's source is read.
void readAll(const void* src, std::size_t bytes) {
  const auto* words = static_cast<const std::uint64_t*>(src);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) sum += words[i];
  volatile std::uint64_t sink = sum;
  (void)sink;
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

Clock::duration Link::duration(std::size_t bytes, double rate) const {
  return seconds(static_cast<double>(bytes) / (rate > 0 ? rate : bytesPerSecond_));
}

std::pair<Clock::time_point, Clock::time_point> Link::reserve(Clock::time_point ready, std::size_t bytes,
                                                              double rate) {
  const Clock::time_point now = Clock::now();
  busy_.erase(std::remove_if(busy_.begin(), busy_.end(), [&](const auto& b) { return b.second <= now; }),
              busy_.end());
  const Clock::duration length = duration(bytes, rate);
  Clock::time_point start = ready;
  for (const auto& [s, e] : busy_) {  // by start: the first gap that holds the copy
    if (start + length <= s) break;
    start = std::max(start, e);
  }
  const auto at = std::upper_bound(busy_.begin(), busy_.end(), start,
                                   [](Clock::time_point t, const auto& b) { return t < b.first; });
  busy_.insert(at, {start, start + length});
  return {start, start + length};
}

// Tickets completed at the times their copies land (after the host traffic a DMA would make, if modelled).
class EmulatedWorker::Completions {
 public:
  Completions()
      : thread_([this] {
          const cpu::ThreadRole counted(cpu::Role::kCopies);  // Note [Host CPU by role]
          loop();
        }) {}
  ~Completions() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void at(Clock::time_point when, Ticket ticket, std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push({when, sequence_++, std::move(ticket), std::move(work)});
    }
    cv_.notify_all();
  }

 private:
  struct Entry {
    Clock::time_point when;
    std::uint64_t sequence;  // equal times complete in submission order
    Ticket ticket;
    std::function<void()> work;
    bool operator>(const Entry& o) const { return when != o.when ? when > o.when : sequence > o.sequence; }
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      if (queue_.empty()) {
        if (stop_) return;
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point when = queue_.top().when;
      if (!stop_ && Clock::now() < when) {  // stopping: what is left completes at once
        cv_.wait_until(lock, when);
        continue;
      }
      Entry entry = queue_.top();
      queue_.pop();
      const bool stopping = stop_;  // the memory a copy touches may be gone: it completes untouched
      lock.unlock();
      std::exception_ptr error;
      try {
        if (entry.work && !stopping) entry.work();
      } catch (...) {
        error = std::current_exception();
      }
      entry.ticket.complete(error);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  std::uint64_t sequence_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

EmulatedWorker::EmulatedWorker(const WorkerOptions& options)
    : device_(slowed(options)),
      index_(options.deviceIndex),
      computeEnd_(Clock::now()),
      up_(options.emulated.linkBytesPerSecond),
      down_(options.emulated.linkBytesPerSecond),
      bulkReady_(computeEnd_),
      completions_(std::make_unique<Completions>()),
      bulk_(options.chunkBytes, 2, [this](void* dst, const void* src, std::size_t bytes) {
        const Side from = sideOf(src, bytes);
        RP_CHECK(from != Side::kDevice && !isHost(dst, bytes), "emulated device: a bulk copy is a host-to-device upload");
        const bool pageable = from == Side::kPageable;
        Clock::time_point begins, end;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          const auto [start, landed] = up_.reserve(std::max(Clock::now(), bulkReady_), bytes,
                                                   pageable ? device_.pageableBytesPerSecond : 0);
          bulkReady_ = end = landed;
          begins = start;
          spans_.push_back({DeviceSpan::Kind::kUpload, start, landed});
        }
        if (pageable) stage(dst, src, bytes, /*upload=*/true, begins, end);  // the copy thread issues it: it stages
        return ChunkedCopyQueue::Landing([this, dst, src, bytes, end] {
          touchHost(dst, src, bytes, /*upload=*/true);
          waitUntil(end);  // the chunk's landing event (Note [What a GPU host pays])
        });
      }) {
  if (!(device_.flopsPerSecond > 0 && device_.linkBytesPerSecond > 0 && device_.memoryBytes > 0)) {
    RP_THROW(InputError, "emulated device '{}': its FLOP rate, link rate and memory must be positive (the profile {})",
             device_.gpu, device_.profile);
  }
}

EmulatedWorker::~EmulatedWorker() = default;

std::string EmulatedWorker::describe() const {
  return fmt::format(
      "emulated {} (profile {}: {:.1f} TFLOP/s sustained, {:.1f} GB/s host link per direction, {:.1f} GB; "
      "nothing computed: shapes only, losses synthetic; host traffic of copies {})",
      device_.gpu, device_.profile, device_.flopsPerSecond / 1e12, device_.linkBytesPerSecond / 1e9,
      device_.memoryBytes / 1e9, device_.hostTraffic ? "modelled" : "not modelled");
}

Placement EmulatedWorker::placement() const {
  return {Backend::kEmulated, index_, fmt::format("emulated {}", device_.gpu)};
}

std::shared_ptr<void> EmulatedWorker::allocate(std::size_t bytes) {
  const std::size_t length = std::max<std::size_t>(bytes, 1);
  std::size_t held = allocated_->load();
  do {
    if (static_cast<double>(held + bytes) > device_.memoryBytes) {
      RP_THROW(InputError, "emulated {}: out of device memory: {:.2f} GB more where {:.2f} GB of {:.2f} GB are held",
               device_.gpu, static_cast<double>(bytes) / 1e9, static_cast<double>(held) / 1e9,
               device_.memoryBytes / 1e9);
    }
  } while (!allocated_->compare_exchange_weak(held, held + bytes));
  void* memory = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    const int error = errno;
    *allocated_ -= bytes;
    RP_THROW(SystemError, "emulated device: reserving {} bytes of address space: {}", length, std::strerror(error));
  }
  return std::shared_ptr<void>(memory, [allocated = allocated_, bytes, length](void* p) {
    ::munmap(p, length);
    *allocated -= bytes;
  });
}

std::size_t EmulatedWorker::freeMemory() {
  return static_cast<std::size_t>(std::max(1.0, device_.memoryBytes - static_cast<double>(allocated_->load())));
}

// Note [Emulated compute memory]: the compute may hold what the card leaves beside the stage slots (or, with
// pipeline.memory_limit_gb, what its cap leaves): past it a meta tensor's allocation fails as an out-of-memory
// would on the card (engine/emulation.cpp's meta allocator throws LibTorch's OutOfMemoryError).
bool EmulatedWorker::holdCompute(std::size_t bytes) {
  const std::size_t cap = computeCap_.load();
  const double limit = cap > 0 ? static_cast<double>(cap) : device_.memoryBytes - static_cast<double>(allocated_->load());
  const std::size_t held = computeHeld_.fetch_add(bytes) + bytes;
  if (static_cast<double>(held) > limit) {
    computeHeld_ -= bytes;
    return false;
  }
  std::size_t peak = computePeak_.load();
  while (held > peak && !computePeak_.compare_exchange_weak(peak, held)) {
  }
  return true;
}

std::size_t EmulatedWorker::takePeakComputeBytes() {
  return computePeak_.exchange(computeHeld_.load());
}

void EmulatedWorker::computeAfter(const Ticket& ticket) {
  const auto events = ticket.deviceEvents();
  if (events.empty()) {
    if (!ticket.done()) ticket.wait();
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : events) computeEnd_ = std::max(computeEnd_, *std::static_pointer_cast<Clock::time_point>(e));
  }
  ticket.throwIfFailed();
}

std::shared_ptr<ComputeMark> EmulatedWorker::mark() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::make_shared<TimeMark>(std::max(Clock::now(), computeEnd_));
}

double EmulatedWorker::elapsedMs(const ComputeMark& from, const ComputeMark& to) {
  const auto& a = static_cast<const TimeMark&>(from);
  const auto& b = static_cast<const TimeMark&>(to);
  waitUntil(b.at);  // the later mark's event (Note [What a GPU host pays])
  return std::chrono::duration<double, std::milli>(b.at - a.at).count();
}

std::shared_ptr<void> EmulatedWorker::pinHost(void* memory, std::size_t bytes, const std::string& what) {
  const auto start = reinterpret_cast<std::uintptr_t>(memory);
  if (!device_.pinned) {
    RP_LOG_WARN(
        "emulated device: the {} ({:.1f} MB) is not pinned (pipeline.emulated_pinned = false, as where "
        "cudaHostRegister fails): copies from and to it are pageable, at {:.1f} GB/s, staged by the thread that "
        "issues them",
        what, static_cast<double>(bytes) / 1e6, device_.pageableBytesPerSecond / 1e9);
  }
  {
    std::lock_guard<std::mutex> lock(host_->mutex);
    host_->ranges[start] = {bytes, device_.pinned};
  }
  return std::shared_ptr<void>(memory, [host = host_, start](void*) {
    std::lock_guard<std::mutex> lock(host->mutex);
    host->ranges.erase(start);
  });
}

EmulatedWorker::Side EmulatedWorker::sideOf(const void* p, std::size_t bytes) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(host_->mutex);
  auto it = host_->ranges.upper_bound(at);
  if (it == host_->ranges.begin()) return Side::kDevice;
  --it;
  if (!(at >= it->first && at + bytes <= it->first + it->second.first)) return Side::kDevice;
  return it->second.second ? Side::kPinned : Side::kPageable;
}

// Note [What a GPU host pays]: two costs a GPU host pays that a modelled device would otherwise hide. (1) CUDA's
// waits spun on events made without cudaEventBlockingSync — the copy thread for every weight chunk, the issuing
// thread for the iteration's timing mark — each a core at nice 0 ahead of the optimizer (Note [Blocking host
// waits], device/cuda/cuda_common.cpp); pipeline.emulated_waits = "spin" makes the same two waits spin here, so
// what that cost the optimizer is measured on this host (docs/benchmarks.md). (2) Host memory cudaHostRegister
// refused (the locked-memory limit) is pageable: the driver stages every copy through a pinned buffer of its
// own, with the issuing thread's CPU, at a lower rate; pipeline.emulated_pinned = false makes every registered
// range pageable, its copies take the profile's link.pageable_gbps, and the thread that issues one reads an
// upload's source or, once it landed, writes a download's destination itself.
void EmulatedWorker::waitUntil(Clock::time_point t) const {
  if (!device_.spinWaits) {
    std::this_thread::sleep_until(t);
    return;
  }
  while (Clock::now() < t) {
  }
}

void EmulatedWorker::stage(void* dst, const void* src, std::size_t bytes, bool upload, Clock::time_point start,
                           Clock::time_point landed) const {
  if (upload) {
    waitUntil(start);     // a pageable copy waits for its stream before it stages
    readAll(src, bytes);  // the staging copy's read
    return;
  }
  waitUntil(landed);  // a download into pageable memory returns once its bytes are out of the staging buffer
  std::memset(dst, 0, bytes);  // the synthetic values it writes
}

void EmulatedWorker::touchHost(void* dst, const void* src, std::size_t bytes, bool upload) const {
  if (!device_.hostTraffic) return;
  if (!upload) {
    std::memset(dst, 0, bytes);  // the synthetic gradient or activation a download writes
    return;
  }
  readAll(src, bytes);  // the read a DMA makes
}

Ticket EmulatedWorker::urgent(void* dst, const void* src, std::size_t bytes, Clock::time_point ready) {
  const Side from = sideOf(src, bytes), to = sideOf(dst, bytes);
  const bool fromHost = from != Side::kDevice, toHost = to != Side::kDevice;
  const bool pageable = (fromHost && !toHost && from == Side::kPageable) || (toHost && !fromHost && to == Side::kPageable);
  Ticket ticket;
  ticket.add();
  if (fromHost && toHost) {  // not a device copy: done as asked
    if (bytes > 0) std::memcpy(dst, src, bytes);
    ticket.complete();
    return ticket;
  }
  Clock::time_point end, begins;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready = std::max(ready, Clock::now());
    end = begins = ready;  // device to device: on the device, not modelled
    if (fromHost || toHost) {
      // Note [Urgent streams are FIFO]: the urgent copies of a direction share one stream (CUDA's upload or
      // download stream), whose copies run in the order issued: one starts after the one before it landed,
      // even where the link has an earlier gap.
      Clock::time_point& streamEnd = fromHost ? uploadStreamEnd_ : downloadStreamEnd_;
      const auto [start, landed] = (fromHost ? up_ : down_).reserve(std::max(ready, streamEnd), bytes,
                                                                     pageable ? device_.pageableBytesPerSecond : 0);
      lastCopy_ = {std::max(ready, streamEnd), landed, true, {}, std::nullopt};  // Note [Device sanitizer]: its ordered start
      ++copies_;
      streamEnd = end = landed;
      begins = start;
      spans_.push_back({fromHost ? DeviceSpan::Kind::kUpload : DeviceSpan::Kind::kDownload, start, landed});
    }
  }
  ticket.addDeviceEvent(std::make_shared<Clock::time_point>(end));
  if (pageable) stage(dst, src, bytes, /*upload=*/fromHost, begins, end);  // Note [What a GPU host pays]
  std::function<void()> work;
  if (device_.hostTraffic && (fromHost || toHost)) {
    work = [this, dst, src, bytes, fromHost] { touchHost(dst, src, bytes, fromHost); };
  }
  completions_->at(end, ticket, std::move(work));
  return ticket;
}

Ticket EmulatedWorker::copyUrgent(void* dst, const void* src, std::size_t bytes) {
  Clock::time_point ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready = computeEnd_;
  }
  return urgent(dst, src, bytes, ready);
}

Ticket EmulatedWorker::copyUrgentAfter(void* dst, const void* src, std::size_t bytes, const ComputeMark& after) {
  return urgent(dst, src, bytes, static_cast<const TimeMark&>(after).at);
}

void EmulatedWorker::copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                              std::shared_ptr<ComputeMark> after) {
  Clock::time_point ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready = std::max(after ? static_cast<const TimeMark&>(*after).at : computeEnd_, Clock::now());
    // Note [Device sanitizer]: its ordered start; its landing is the queue thread's, known by the ticket.
    lastCopy_ = {ready, ready, true, {}, ticket};
    ++copies_;
  }
  bulk_.submit(ticket, dst, src, bytes, [this, ready] {
    std::lock_guard<std::mutex> lock(mutex_);
    bulkReady_ = std::max(bulkReady_, ready);
  });
}

namespace {
[[noreturn]] void hostPlaneOnly(const char* what) {
  RP_THROW(InputError,
           "the emulated device has no {}: its stage outputs go through the host, pipeline.tensor_channel = \"host\"",
           what);
}
}  // namespace

std::unique_ptr<HandoffRing> EmulatedWorker::shareRing(int, std::size_t) {
  hostPlaneOnly("device-direct hand-off rings");
}

std::unique_ptr<PeerRing> EmulatedWorker::openRing(const std::string&) {
  hostPlaneOnly("device-direct hand-off rings");
}

std::string EmulatedWorker::linksId() {
  hostPlaneOnly("peer links");
}

std::unique_ptr<PeerLinks> EmulatedWorker::joinLinks(const std::string&, int, int, int, std::size_t) {
  hostPlaneOnly("peer links");
}

void EmulatedWorker::expectCompute(const ComputeWork& work) {
  const Clock::duration length =
      seconds(work.flops / device_.flopsPerSecond + work.kernels * device_.kernelSeconds);
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point start = std::max(Clock::now(), computeEnd_);
  computeEnd_ = start + length;
  lastCompute_ = {start, computeEnd_, false, {}, std::nullopt};
  computeDeclared_ = false;
  if (!spans_.empty() && spans_.back().kind == DeviceSpan::Kind::kCompute && spans_.back().end == start) {
    spans_.back().end = computeEnd_;  // back to back: one span
  } else {
    spans_.push_back({DeviceSpan::Kind::kCompute, start, computeEnd_});
  }
}

std::vector<DeviceSpan> EmulatedWorker::takeDeviceSpans() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(spans_, {});
}

// Note [Device sanitizer]: the device keeps each region's latest-ending writer and reader on its own timeline,
// and checks every declared operation against them. A compute that reads memory whose copy lands after the compute
// starts (an activation read without computeAfter), a copy that writes memory an earlier compute still reads or
// writes (weights into a stage slot ordered before the slot's last job ended: a release mark dropped or taken too
// early), a copy that reads memory an earlier compute still writes (a gradient downloaded before its last
// backward), or a compute that writes memory a copy still reads (a gradient reused before its download landed) is
// a violation: it names both operations, the memory and their times on the device's clock. A copy's start is its
// ordered one — when its dependencies (its mark, its stream, its submission) let it start — so the verdict does
// not depend on how busy the link was. The check is on the timeline: an order the host happened to cover by
// waiting is not reported; the tests make the device run behind the host. The first violation is thrown by the
// next declareCopy or checkAccesses (a compute is declared inside autograd's hooks, where nothing may throw).
double EmulatedWorker::at(Clock::time_point t) const {
  return std::chrono::duration<double, std::milli>(t - origin_).count();
}

std::string EmulatedWorker::describe(const Region& r) const {
  switch (r.kind) {
    case Region::Kind::kSlot:
      return fmt::format("stage slot {}", r.id);
    case Region::Kind::kInput:
      return fmt::format("fetched input #{}", r.id);
    case Region::Kind::kGradient:
      return fmt::format("the gradients of layer {}", r.id);
  }
  return "?";
}

void EmulatedWorker::check(const Op& earlier, const Op& later, const Region& region, const char* headline) {
  if (later.start >= earlier.end) return;
  if (violations_++ > 0) return;
  violation_ = fmt::format(
      "emulated device sanitizer ({}): {}: {}; earlier: {} {} over [+{:.2f}, +{:.2f}] ms; later: {} {} ordered to "
      "start at +{:.2f} ms, {:.2f} ms before the earlier one ends (Note [Device sanitizer])",
      device_.gpu, headline, describe(region), earlier.copy ? "copy" : "compute", earlier.what, at(earlier.start),
      at(earlier.end), later.copy ? "copy" : "compute", later.what, at(later.start),
      std::chrono::duration<double, std::milli>(earlier.end - later.start).count());
}

void EmulatedWorker::declareCompute(const Access& access) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (computeDeclared_) return;  // no compute submitted since the last declaration
  computeDeclared_ = true;
  Op op = lastCompute_;
  op.what = access.what;
  for (const Region& r : access.reads) {
    History& h = regions_[r];
    if (h.write && h.write->copy) check(*h.write, op, r, "a compute reads memory before the copy that fills it lands");
    if (h.write && h.write->landing && !h.write->landing->done() && violations_++ == 0) {
      violation_ = fmt::format(
          "emulated device sanitizer ({}): a compute reads memory its copy has not finished writing: {}; earlier: "
          "copy {} ordered to start at +{:.2f} ms, not landed when the compute was submitted (its ticket not waited "
          "for); later: compute {} ordered to start at +{:.2f} ms (Note [Device sanitizer])",
          device_.gpu, describe(r), h.write->what, at(h.write->start), op.what, at(op.start));
    }
    if (!h.read || h.read->end < op.end) h.read = op;
    if (r.kind == Region::Kind::kInput) regions_.erase(r);  // one compute reads a fetched input
  }
  for (const Region& r : access.writes) {
    History& h = regions_[r];
    if (h.read && h.read->copy) check(*h.read, op, r, "a compute overwrites memory a copy is still reading");
    if (!h.write || h.write->end < op.end) h.write = op;
  }
}

void EmulatedWorker::declareCopy(const Access& access) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (declaredCopies_ != copies_) {  // a copy submitted since the last declaration
      declaredCopies_ = copies_;
      Op op = lastCopy_;
      op.what = access.what;
      for (const Region& r : access.reads) {
        History& h = regions_[r];
        if (h.write && !h.write->copy) check(*h.write, op, r, "a copy reads memory an earlier compute is still writing");
        if (!h.read || h.read->end < op.end) h.read = op;
      }
      for (const Region& r : access.writes) {
        // Fetched inputs a declared compute never read (a frozen stage's last gradient) go once 64 newer exist.
        if (r.kind == Region::Kind::kInput) regions_.erase({Region::Kind::kInput, r.id - 64});
        History& h = regions_[r];
        if (h.read && !h.read->copy) check(*h.read, op, r, "a copy writes memory an earlier compute still reads");
        if (h.write && !h.write->copy) check(*h.write, op, r, "a copy writes memory an earlier compute still writes");
        h.write = op;
        h.read.reset();
      }
    }
  }
  checkAccesses();
}

void EmulatedWorker::checkAccesses() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (violations_ == 0) return;
  RP_THROW(InternalError, "{}{}", violation_,
           violations_ > 1 ? fmt::format("; {} more after it", violations_ - 1) : std::string());
}

}  // namespace rp::device::emulated
