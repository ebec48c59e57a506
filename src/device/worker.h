// The device seam (docs/architecture.md, "Backends"): a Worker is the device one rank computes on, as the
// engine sees it — the memory its replica lives in, and copies between host memory (the node store) and
// worker memory on a queue where urgent copies (activations, activation gradients, gradient downloads) go
// ahead of bulk ones (weight uploads, in chunks), each submission completing a Ticket the engine waits on
// before it moves a fence. One folder per
// backend (cpu/, cuda/, emulated/); registry.cpp is the only file that knows which are compiled. Torch-free.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace rp::device {

// Completion of work submitted to a worker: done() polls, wait() blocks and rethrows the first error (and
// counts as a copy wait of the calling thread: device/host_waits.h), throwIfFailed() rethrows it without
// blocking. Backends add pending pieces and complete them, from any thread. Copies of a Ticket share its state.
// A backend whose device can order its compute after a piece without the host (CUDA: an event recorded on the
// copy's stream) attaches that to the ticket (addDeviceEvent); Worker::computeAfter uses it.
// A backend whose completions can stop arriving (a CUDA stream after a device fault runs no more callbacks)
// sets a health check: wait() runs it every `kHealthPeriod` while it waits, and rethrows what it throws —
// an error naming the fault, not a hang.
class Ticket {
 public:
  static constexpr std::chrono::milliseconds kHealthPeriod{500};
  Ticket();  // nothing pending: done
  bool done() const;
  void wait() const;
  // wait(), and while the ticket is pending, `meanwhile` on this thread every `period` until it returns false
  // (Note [Prefetch while the device computes]: the next job's prefetch, tried while a job's downloads land);
  // the health check runs meanwhile as in wait().
  void wait(const std::function<bool()>& meanwhile, std::chrono::microseconds period) const;
  void throwIfFailed() const;
  // Backend side.
  void add() const;
  void complete(std::exception_ptr error = nullptr) const;
  void setHealthCheck(std::function<void()> check) const;
  void addDeviceEvent(std::shared_ptr<void> event) const;  // opaque to all but the backend that made it
  std::vector<std::shared_ptr<void>> deviceEvents() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The emulated backend's GPU (device/emulated/, docs/emulated.md): what a hardware profile (the simulator's
// cluster-configs/*.toml) says of one GPU and of its link to the host.
struct EmulatedDevice {
  std::string profile;            // the profile's name ("rtx4090x8")
  std::string gpu;                // the GPU's ("RTX 4090")
  double flopsPerSecond = 0;      // sustained: the tensor peak x the matmul efficiency
  double linkBytesPerSecond = 0;  // per direction: this GPU's share of its host bridge
  double memoryBytes = 0;
  double kernelSeconds = 0;  // what each kernel adds to a compute span (launch and tail: the floor of small ops)
  bool hostTraffic = false;  // copies also read and write the host memory a DMA would (pipeline.emulated_host_traffic)
  // Note [What a GPU host pays]: the host's waits for the device spin a core, as CUDA's did on events made without
  // cudaEventBlockingSync (pipeline.emulated_waits = "spin"), rather than sleep.
  bool spinWaits = false;
  // pinHost registers nothing, as where cudaHostRegister fails (the locked-memory limit; pipeline.emulated_pinned =
  // false): copies from and to such memory are pageable, at `pageableBytesPerSecond` a direction, and the host
  // thread that issues one stages its bytes itself.
  bool pinned = true;
  double pageableBytesPerSecond = 0;  // this GPU's share of the bridge for pageable copies
};

struct WorkerOptions {
  std::size_t chunkBytes = 64u << 20;  // bulk copies go in pieces of at most this (pipeline.upload_chunk_mb)
  int deviceIndex = 0;                 // cuda: the device, as the CUDA runtime numbers the visible ones
  double computeSpeed = 1.0;  // cpu, testing (RP_SLOW_WORKER): compute stretched to run at this fraction of its pace
  EmulatedDevice emulated{};  // emulated: the device modelled
};

// The compute about to be submitted, for a device that models its time instead of running it (the emulated
// device): its FLOPs and its kernels.
struct ComputeWork {
  double flops = 0;
  int kernels = 0;
};

// Note [Device sanitizer]: memory a compute or a copy touches, named by the engine (on the emulated device the
// tensors are meta tensors, without addresses): a stage slot, a fetched input, a layer's gradients.
struct Region {
  enum class Kind : std::uint8_t { kSlot, kInput, kGradient };
  Kind kind = Kind::kSlot;
  std::int64_t id = 0;  // the slot, the fetch's serial, the layer
  bool operator<(const Region& o) const { return kind != o.kind ? kind < o.kind : id < o.id; }
};
struct Access {
  std::vector<Region> reads, writes;
  std::string what;  // the operation, for a violation's message ("forward of layer 3, mb 1, job 0 fwd 0-2, step 2")
};

// What a device did, by its own clock (the emulated device: its model's): a span of compute or of one
// direction of its host link.
struct DeviceSpan {
  enum class Kind { kCompute, kUpload, kDownload };
  Kind kind = Kind::kCompute;
  std::chrono::steady_clock::time_point start, end;
};

// Where a worker's memory and compute are: the torch device of the tensors a job computes with.
struct Placement {
  Backend backend = Backend::kCpu;
  int index = -1;    // the CUDA device; -1 on the CPU
  std::string name;  // the device's name ("NVIDIA H100 80GB HBM3"); empty on the CPU
};

// A point in the worker's compute order: everything submitted before it (CPU: the time it was taken).
class ComputeMark {
 public:
  virtual ~ComputeMark() = default;
};

// While alive, the compute the thread submits (LibTorch ops) runs on the worker's compute stream (a CUDA
// backend: a stream guard; the CPU backend computes on the calling thread and needs nothing).
class ComputeScope {
 public:
  virtual ~ComputeScope() = default;
};

// The device-direct tensor channel's hand-off buffers (docs/protocol.md, "Device-direct"): `slots` buffers of
// one worker's memory that the node's other ranks open and copy from without a host round trip (CUDA: IPC
// memory and one interprocess event per slot; CPU: a shared-memory segment).
class HandoffRing {
 public:
  virtual ~HandoffRing() = default;
  // What Worker::openRing takes on another rank of the node (bytes, not text).
  virtual std::string handle() const = 0;
  // Copies `bytes` of worker memory at `src` into `slot` after the compute submitted so far; `src` may be
  // reused when it returns. A peer's read of the slot issued after this call sees these bytes.
  virtual void write(int slot, const void* src, std::size_t bytes) = 0;
  // Every peer has opened the ring: what made it openable by name goes (CPU: the segment's name).
  virtual void opened() = 0;
};

// Another rank's HandoffRing, opened on this worker.
class PeerRing {
 public:
  virtual ~PeerRing() = default;
  // Copies `slot` into worker memory at `dst` once the owner's last write of it has landed (CUDA: the upload
  // stream waits on the slot's event), after the compute submitted so far, ahead of bulk copies.
  virtual Ticket read(int slot, void* dst, std::size_t bytes) = 0;
};

// Point-to-point links among the node's workers (docs/protocol.md, "Peer links"; CUDA: NCCL, one communicator
// and stream per ordered pair of ranks, so each direction is a FIFO of its own). A pair's receives must be
// made in the order of its sends; `tag` names the tensor, and a backend that can check the order does (CPU).
class PeerLinks {
 public:
  virtual ~PeerLinks() = default;
  // Copies `bytes` of worker memory at `src` into send buffer `slot` after the compute submitted so far and
  // sends it to `peer`; returns at once, and `src` may be reused. The slot is rewritten only after its last
  // send was received.
  virtual void send(int peer, int slot, const void* src, std::size_t bytes, std::uint64_t tag) = 0;
  // Receives the next tensor `peer` sent here into worker memory at `dst`, after the compute submitted so far.
  virtual Ticket receive(int peer, void* dst, std::size_t bytes, std::uint64_t tag) = 0;
};

// Thread-safety: submissions from the rank's main thread; tickets may be waited on from any thread.
class Worker {
 public:
  virtual ~Worker() = default;
  virtual std::string describe() const = 0;
  virtual Placement placement() const = 0;
  // `bytes` of zero-filled worker memory, 64-byte aligned, for the replica; freed when the last holder lets go.
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  // Makes the worker's compute stream current for the calling thread until the scope ends.
  virtual std::unique_ptr<ComputeScope> enterCompute() = 0;
  // Orders the compute submitted after this call after `ticket`'s copies (an activation the next compute reads)
  // without the host waiting where the device can (CUDA: the compute stream waits on the copies' events; a
  // ticket without them is waited for). The CPU's copies of tensors are done when they return, so it only
  // rethrows their error. Then `ticket` needs no wait(): the fences that publish the compute's results cover it.
  virtual void computeAfter(const Ticket& ticket) = 0;
  // A mark after the compute submitted so far, and the milliseconds of compute between two marks (waits
  // until `to` has been reached): per-layer timings without stopping the compute to read a clock.
  virtual std::shared_ptr<ComputeMark> mark() = 0;
  virtual double elapsedMs(const ComputeMark& from, const ComputeMark& to) = 0;
  // Registers host memory (the node store, the tensor arena) for direct copies while the handle lives;
  // null where there is nothing to register (CPU) or registration failed — then copies still work, staged
  // by the driver, and the backend has logged one warning naming `what` and why (docs/errors.md).
  virtual std::shared_ptr<void> pinHost(void* memory, std::size_t bytes, const std::string& what) = 0;
  // Worker memory free for stages now (CUDA: cudaMemGetInfo); 0 = host memory, no device budget.
  virtual std::size_t freeMemory() = 0;
  // The most worker memory the compute held at once since the last call (CUDA: the caching allocator's
  // peak, then reset); 0 where not measured (CPU: the memory report measures the process).
  virtual std::size_t takePeakComputeBytes() = 0;
  // Caps what the compute may hold on the device at once at `bytes`, beside what allocate() gave: past it an
  // allocation fails as out of memory (CUDA: the caching allocator's memory fraction, for the device and the
  // whole process). pipeline.memory_limit_gb, enforced (Note [Stage slots]). CPU: host memory, not capped.
  virtual void capComputeMemory(std::size_t bytes) = 0;
  // Copies `bytes` from `src` to `dst` ahead of every queued bulk copy, after the compute submitted so far
  // (which may have produced `src`, or may still read a block `dst` reuses).
  virtual Ticket copyUrgent(void* dst, const void* src, std::size_t bytes) = 0;
  // A download (`dst` in host memory) ordered after the compute up to `after` (a mark of this worker) only, so
  // it may overlap the compute submitted since, which must not write `src` (Note [Gradient marks]).
  virtual Ticket copyUrgentAfter(void* dst, const void* src, std::size_t bytes, const ComputeMark& after) = 0;
  // Queues a copy of `bytes` as chunks of at most chunkBytes, behind urgent copies; adds to `ticket`. Ordered
  // after the compute up to `after` (a mark of this worker taken after the last compute that reads or writes the
  // memory at `dst`: a stage slot's previous job, Note [Slot release]), so it may overlap the compute submitted
  // since; where `after` is null, after the compute submitted so far.
  virtual void copyBulk(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                        std::shared_ptr<ComputeMark> after) = 0;
  // Hand-off buffers other ranks of the node open (openRing, with the handle), and one of theirs opened here.
  // Errors name the call and why (a SystemError; CUDA IPC needs the ranks' GPUs to reach each other).
  virtual std::unique_ptr<HandoffRing> shareRing(int slots, std::size_t slotBytes) = 0;
  virtual std::unique_ptr<PeerRing> openRing(const std::string& handle) = 0;
  // Peer links among the node's `ranks` workers, collective: `id` is what node rank 0's linksId() returned,
  // given to every rank; `slots` send buffers of `slotBytes`. Errors name the call and why (a SystemError; an
  // InputError where this build or backend has no links).
  virtual std::string linksId() = 0;
  virtual std::unique_ptr<PeerLinks> joinLinks(const std::string& id, int rank, int ranks, int slots,
                                               std::size_t slotBytes) = 0;
  // A device whose compute is a model (the emulated one: its tensors are LibTorch meta tensors, shapes without
  // values) is told what the compute submitted next costs, before it is submitted; the others compute it.
  virtual bool modelsCompute() const { return false; }
  virtual void expectCompute(const ComputeWork&) {}
  // The device's spans since the last call, by its own clock; empty where the device keeps none (cpu, cuda).
  virtual std::vector<DeviceSpan> takeDeviceSpans() { return {}; }
  // Note [Device sanitizer]: a device that checks every copy and compute against the memory it touches, on its
  // own timeline. The engine declares what the compute it submitted last (expectCompute) and the copy this thread
  // submitted last touch; an access that a GPU would run against memory not yet written, or still in use, is
  // recorded, and the first is thrown (InternalError) by the next declareCopy or by checkAccesses.
  virtual bool sanitizes() const { return false; }
  virtual void declareCompute(const Access&) {}
  virtual void declareCopy(const Access&) {}
  virtual void checkAccesses() {}
  // Note [Emulated compute memory]: the memory the modelled device's compute would hold (its meta tensors'
  // bytes, counted by the engine's meta allocator): hold `bytes` more, false where that passes what the card
  // leaves the compute (its memory less the stage slots, or capComputeMemory's cap): an out-of-memory.
  virtual bool holdCompute(std::size_t) { return true; }
  virtual void releaseCompute(std::size_t) {}
};

// The worker of `backend` (registry.cpp); an InputError naming the backend where this build lacks it.
std::unique_ptr<Worker> makeWorker(Backend backend, const WorkerOptions& options);

}  // namespace rp::device
