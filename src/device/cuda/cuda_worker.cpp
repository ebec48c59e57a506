#include "device/cuda/cuda_worker.h"

#include <sys/resource.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "device/copy_queue.h"
#include "device/cuda/cuda_common.h"

namespace rp::device::cuda {
namespace {

// The caching allocator's statistics over all its pools: entry 0 (StatType::AGGREGATE, whose namespace moved
// between LibTorch releases; the GPU machines build against their own).
constexpr std::size_t kAggregate = 0;

// Weight chunks on the link at once (Note [Chunks in flight], device/copy_queue.cpp).
constexpr int kWeightChunksInFlight = 2;

struct EventMark : ComputeMark {
  cudaEvent_t event = nullptr;
  ~EventMark() override {
    if (event) cudaEventDestroy(event);
  }
};

// Host ranges registered in this process, counted: threads-as-ranks register the same node store.
struct PinRegistry {
  std::mutex mutex;
  std::map<void*, int> count;
};
PinRegistry& pins() {
  static PinRegistry registry;
  return registry;
}

std::string memlockLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return fmt::format("{} KiB", static_cast<unsigned long long>(limit.rlim_cur) / 1024);
}

class CudaWorker : public Worker {
 public:
  // `waits`: blockHostWaits' answer for the device, made current already (Note [Blocking host waits]).
  CudaWorker(const WorkerOptions& options, std::string waits)
      : device_(options.deviceIndex),
        waits_(std::move(waits)),
        bulkQueue_(
            options.chunkBytes, kWeightChunksInFlight,
            [this](void* dst, const void* src, std::size_t bytes) -> ChunkedCopyQueue::Landing {
              check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_.bulk), "cudaMemcpyAsync (weights)", device_);
              // The copy thread waits for it: a blocking event (Note [Blocking host waits]).
              cudaEvent_t landed = nullptr;
              check(cudaEventCreateWithFlags(&landed, kHostWaitEvent), "cudaEventCreate (weights)", device_);
              const cudaError_t recorded = cudaEventRecord(landed, s_.bulk);
              if (recorded != cudaSuccess) cudaEventDestroy(landed);
              check(recorded, "cudaEventRecord (weights)", device_);
              return [this, landed] {
                const cudaError_t rc = cudaEventSynchronize(landed);
                cudaEventDestroy(landed);
                check(rc, "cudaEventSynchronize (weights)", device_);
              };
            },
            [this] { check(cudaSetDevice(device_), "cudaSetDevice", device_); }) {
    s_.device = device_;
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    // Stream priorities order kernels only: CUDA's documentation says they have no effect on copies between host
    // and device. An activation copy goes ahead of the weights because it is on a stream of its own while at most
    // two weight chunks are on the link (Note [Chunks in flight]); the priorities below change nothing for copies.
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange", device_);
    check(cudaStreamCreateWithPriority(&s_.compute, cudaStreamNonBlocking, least), "cudaStreamCreate (compute)",
          device_);
    check(cudaStreamCreateWithPriority(&s_.upload, cudaStreamNonBlocking, greatest), "cudaStreamCreate (upload)",
          device_);
    check(cudaStreamCreateWithPriority(&s_.download, cudaStreamNonBlocking, greatest), "cudaStreamCreate (download)",
          device_);
    check(cudaStreamCreateWithPriority(&s_.bulk, cudaStreamNonBlocking, least), "cudaStreamCreate (weights)", device_);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties", device_);
    name_ = prop.name;
    totalBytes_ = prop.totalGlobalMem;
    chunkBytes_ = bulkQueue_.chunkBytes();
    if (!waits_.empty()) {
      RP_LOG_WARN(
          "CUDA device {}: the waits inside LibTorch and the driver may spin a core: {}; the worker's own waits block "
          "(Note [Blocking host waits])",
          device_, waits_);
    }
  }

  ~CudaWorker() override {
    // Then the queue's thread finishes its chunks, then the streams go.
    cudaSetDevice(device_);
    if (s_.compute) waitForStream(s_.compute);
  }

  std::string describe() const override {
    return fmt::format(
        "cuda:{} ({}, {:.1f} GB; compute on its own stream, activation copies on streams of their own, weight uploads "
        "in chunks of {:.1f} MB, two in flight, on another; host waits {})",
        device_, name_, static_cast<double>(totalBytes_) / 1e9, static_cast<double>(chunkBytes_) / 1e6,
        waits_.empty() ? "block" : "block in the worker only");
  }

  Placement placement() const override { return {Backend::kCuda, device_, name_}; }

  std::shared_ptr<void> allocate(std::size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    void* memory = nullptr;
    const cudaError_t err = cudaMalloc(&memory, std::max<std::size_t>(bytes, 1));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      RP_THROW(InputError,
               "CUDA device {} cannot hold a stage slot of {:.1f} MB ({:.1f} MB free of {:.1f} MB): lower "
               "pipeline.memory_limit_gb or raise pipeline.memory_reserve_gb so the planner makes smaller stages",
               device_, static_cast<double>(bytes) / 1e6, static_cast<double>(free) / 1e6,
               static_cast<double>(total) / 1e6);
    }
    check(err, "cudaMalloc", device_);
    check(cudaMemsetAsync(memory, 0, bytes, s_.compute), "cudaMemsetAsync", device_);
    check(waitForStream(s_.compute), "cudaEventSynchronize (stage slot zeroed)", device_);
    const int device = device_;
    return std::shared_ptr<void>(memory, [device](void* p) {
      cudaSetDevice(device);
      cudaFree(p);
    });
  }

  std::unique_ptr<ComputeScope> enterCompute() override {
    struct Scope : ComputeScope {
      explicit Scope(c10::cuda::CUDAStream s) : guard(s) {}
      c10::cuda::CUDAStreamGuard guard;
    };
    return std::make_unique<Scope>(
        c10::cuda::getStreamFromExternal(s_.compute, static_cast<c10::DeviceIndex>(device_)));
  }

  // The compute stream waits on the events the ticket's copies recorded on their streams (completeWhenReached);
  // a ticket without them (none of the urgent paths) is waited for on the host.
  void computeAfter(const Ticket& ticket) override {
    const auto events = ticket.deviceEvents();
    if (events.empty()) {
      if (!ticket.done()) ticket.wait();
    }
    ticket.throwIfFailed();
    for (const auto& event : events) {
      check(cudaStreamWaitEvent(s_.compute, static_cast<cudaEvent_t>(event.get()), 0),
            "cudaStreamWaitEvent (compute after a copy)", device_);
    }
  }

  // Timed, and waited for by elapsedMs: a blocking event (Note [Blocking host waits]).
  std::shared_ptr<ComputeMark> mark() override {
    auto m = std::make_shared<EventMark>();
    check(cudaEventCreateWithFlags(&m->event, kTimedHostWaitEvent), "cudaEventCreate", device_);
    check(cudaEventRecord(m->event, s_.compute), "cudaEventRecord", device_);
    return m;
  }

  double elapsedMs(const ComputeMark& from, const ComputeMark& to) override {
    const auto& a = static_cast<const EventMark&>(from);
    const auto& b = static_cast<const EventMark&>(to);
    check(cudaEventSynchronize(b.event), "cudaEventSynchronize", device_);
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a.event, b.event), "cudaEventElapsedTime", device_);
    return ms;
  }

  std::shared_ptr<void> pinHost(void* memory, std::size_t bytes, const std::string& what) override {
    if (bytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(pins().mutex);
    auto& count = pins().count[memory];
    if (count == 0) {
      const cudaError_t err = cudaHostRegister(memory, bytes, cudaHostRegisterPortable);
      if (err != cudaSuccess) {
        cudaGetLastError();
        pins().count.erase(memory);
        RP_LOG_WARN(
            "could not pin the {} ({:.1f} MB) for direct copies: cudaHostRegister returned {} ({}); the locked-memory "
            "limit is {} (ulimit -l; raise it, e.g. 'ulimit -l unlimited' or LimitMEMLOCK in the job's limits). "
            "Copies from and to it go through the driver's staging buffers instead, slower",
            what, static_cast<double>(bytes) / 1e6, cudaGetErrorName(err), cudaGetErrorString(err), memlockLimit());
        return nullptr;
      }
    }
    ++count;
    return std::shared_ptr<void>(memory, [](void* p) {
      std::lock_guard<std::mutex> lock(pins().mutex);
      auto it = pins().count.find(p);
      if (it == pins().count.end()) return;
      if (--it->second == 0) {
        cudaHostUnregister(p);
        pins().count.erase(it);
      }
    });
  }

  std::size_t freeMemory() override {
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", device_);
    // What the caching allocator holds but does not use is free for stages too (nothing before its first use).
    if (!c10::cuda::CUDACachingAllocator::get()->initialized()) return free;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_));
    const auto cached = stats.reserved_bytes[kAggregate].current - stats.allocated_bytes[kAggregate].current;
    return free + static_cast<std::size_t>(std::max<std::int64_t>(0, cached));
  }

  void capComputeMemory(std::size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", device_);
    // The fraction is kept by the caching allocator, which LibTorch makes with its CUDA state on the first
    // device tensor (so one of a byte here, back in its cache at once).
    (void)at::empty({1},
                    at::TensorOptions().dtype(at::kByte).device(at::kCUDA, static_cast<c10::DeviceIndex>(device_)));
    // The fraction is checked only when the allocator asks the device for a new segment: blocks it already
    // holds cached (an earlier plan's, an earlier run's in this process) would be handed out past the new cap.
    // So what it holds cached and unused goes back to the device first (blocks in use stay where they are).
    c10::cuda::CUDACachingAllocator::emptyCache();
    const double fraction = std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device_));
    RP_LOG_INFO(
        "CUDA device {}: the compute may hold {:.2f} GB beside the stage slots (pipeline.memory_limit_gb; "
        "the caching allocator's memory fraction {:.5f} of {:.2f} GB)",
        device_, static_cast<double>(bytes) / 1e9, fraction, static_cast<double>(total) / 1e9);
  }

  std::size_t takePeakComputeBytes() override {
    const auto index = static_cast<c10::DeviceIndex>(device_);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    const auto peak = stats.allocated_bytes[kAggregate].peak;
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    return static_cast<std::size_t>(std::max<std::int64_t>(0, peak));
  }

  // Activations and gradients: uploads (into device memory) on the upload stream, downloads on the download
  // stream; either first waits for the compute submitted so far (it produced what a download reads, and may
  // still read a block an upload reuses).
  Ticket copyUrgent(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return {};
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, dst), "cudaPointerGetAttributes", device_);
    cudaStream_t stream = attr.type == cudaMemoryTypeDevice ? s_.upload : s_.download;
    afterCompute(stream);
    return copyOn(stream, dst, src, bytes);
  }

  // A download after the compute up to `after` only: the download stream waits on the mark's event.
  Ticket copyUrgentAfter(void* dst, const void* src, std::size_t bytes, const ComputeMark& after) override {
    if (bytes == 0) return {};
    check(cudaStreamWaitEvent(s_.download, static_cast<const EventMark&>(after).event, 0),
          "cudaStreamWaitEvent (download)", device_);
    return copyOn(s_.download, dst, src, bytes);
  }

  // Weights: the queue's thread issues the chunks on the weights stream, two on the link at a time, after the
  // compute up to `after` — the last job that read the slot being refilled (Note [Slot release]) — or, without
  // it, after the compute submitted before this call.
  void copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                std::shared_ptr<ComputeMark> after) override {
    std::shared_ptr<EventMark> event = std::static_pointer_cast<EventMark>(std::move(after));
    if (!event) {
      event = std::make_shared<EventMark>();
      check(cudaEventCreateWithFlags(&event->event, kStreamOrderEvent), "cudaEventCreate", device_);
      check(cudaEventRecord(event->event, s_.compute), "cudaEventRecord", device_);
    }
    bulkQueue_.submit(ticket, dst, src, bytes, [this, event] {
      check(cudaStreamWaitEvent(s_.bulk, event->event, 0), "cudaStreamWaitEvent (weights)", device_);
    });
  }

  std::unique_ptr<HandoffRing> shareRing(int slots, std::size_t slotBytes) override {
    return shareCudaRing(ringStreams(), slots, slotBytes);
  }
  std::unique_ptr<PeerRing> openRing(const std::string& handle) override { return openCudaRing(ringStreams(), handle); }
  std::string linksId() override { return cudaLinksId(); }
  std::unique_ptr<PeerLinks> joinLinks(const std::string& id, int rank, int ranks, int slots,
                                       std::size_t slotBytes) override {
    return joinCudaLinks(ringStreams(), id, rank, ranks, slots, slotBytes);
  }

 private:
  RingStreams ringStreams() {
    return {device_, s_.compute, s_.upload, [this](cudaStream_t stream) { afterCompute(stream); }};
  }

  Ticket copyOn(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {
    Ticket t;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync (urgent)", device_);
    completeWhenReached(stream, t, device_);
    return t;
  }

  void afterCompute(cudaStream_t stream) {
    if (!s_.order) check(cudaEventCreateWithFlags(&s_.order, kStreamOrderEvent), "cudaEventCreate", device_);
    check(cudaEventRecord(s_.order, s_.compute), "cudaEventRecord", device_);
    check(cudaStreamWaitEvent(stream, s_.order, 0), "cudaStreamWaitEvent", device_);
  }

  const int device_;
  const std::string waits_;  // why the context's waits may spin; empty where they block
  std::string name_;
  std::size_t totalBytes_ = 0, chunkBytes_ = 0;
  struct Streams {
    int device = 0;
    cudaStream_t compute = nullptr, upload = nullptr, download = nullptr, bulk = nullptr;
    cudaEvent_t order = nullptr;  // reused: a wait captures the event's state when it is issued
    ~Streams() {
      cudaSetDevice(device);
      for (cudaStream_t s : {compute, upload, download, bulk}) {
        if (s) cudaStreamDestroy(s);
      }
      if (order) cudaEventDestroy(order);
    }
  } s_;
  ChunkedCopyQueue bulkQueue_;  // last: its thread uses the streams (and is joined before they go)
};

}  // namespace

std::unique_ptr<Worker> makeCudaWorker(const WorkerOptions& options) {
  if (!torchCudaLoaded()) {  // Note [LibTorch's CUDA kernels]
    RP_THROW(SystemError,
             "LibTorch's CUDA kernels are not loaded in this process: its main must call "
             "rp::device::loadCudaKernels() before any LibTorch call");
  }
  // Before the worker's streams and its copy thread touch the device (Note [Blocking host waits]).
  std::string waits = blockHostWaits(options.deviceIndex);
  return std::make_unique<CudaWorker>(options, std::move(waits));
}

}  // namespace rp::device::cuda
