// The CUDA backend's hand-off rings (docs/protocol.md, "Device-direct"): one cudaMalloc of `slots` slots and
// one interprocess event per slot, exported with cudaIpcGetMemHandle / cudaIpcGetEventHandle. A write copies
// into the slot on the compute stream and records the slot's event there; a peer's read makes its upload
// stream wait on that event (no host round trip) and copies from the opened memory. CUDA IPC cannot open a
// process's own memory, so ranks that share a process (threads as ranks) read the owner's pointer and events.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "device/cuda/cuda_common.h"

namespace rp::device::cuda {
namespace {

constexpr std::uint32_t kMagic = 0x52504952;  // "RPIR"

struct Header {
  std::uint32_t magic = kMagic;
  std::int32_t pid = 0;
  std::int32_t device = 0;
  std::int32_t slots = 0;
  std::uint64_t slotBytes = 0;
  std::uint8_t* base = nullptr;  // the owner's pointer: valid in the owner's process only
  cudaIpcMemHandle_t memory{};
};

struct SlotHandle {
  cudaIpcEventHandle_t ipc{};
  cudaEvent_t event = nullptr;  // the owner's event: valid in the owner's process only
};

std::uint8_t* slotAt(std::uint8_t* base, const Header& h, int slot, std::size_t bytes) {
  RP_CHECK(slot >= 0 && slot < h.slots && bytes <= h.slotBytes,
           "hand-off slot {} of {} bytes in a ring of {} slots of {} bytes", slot, bytes, h.slots, h.slotBytes);
  return base + static_cast<std::size_t>(slot) * h.slotBytes;
}

std::string ipcAdvice() {
  return "the device-direct tensor channel needs CUDA IPC between the node's ranks (GPUs with peer access, no "
         "container isolating their processes); set pipeline.tensor_channel = \"host\"";
}

class CudaRing : public HandoffRing {
 public:
  CudaRing(RingStreams streams, int slots, std::size_t slotBytes) : s_(std::move(streams)) {
    h_.pid = ::getpid();
    h_.device = s_.device;
    h_.slots = slots;
    h_.slotBytes = std::max<std::size_t>(slotBytes, 1);
    try {
      create(slots);
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaRing() override { release(); }

  std::string handle() const override {
    std::string out(sizeof(Header) + slots_.size() * sizeof(SlotHandle), '\0');
    std::memcpy(out.data(), &h_, sizeof(Header));
    std::memcpy(out.data() + sizeof(Header), slots_.data(), slots_.size() * sizeof(SlotHandle));
    return out;
  }

  void write(int slot, const void* src, std::size_t bytes) override {
    std::uint8_t* dst = slotAt(h_.base, h_, slot, bytes);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_.compute), "cudaMemcpyAsync (hand-off)", s_.device);
    check(cudaEventRecord(slots_[static_cast<std::size_t>(slot)].event, s_.compute), "cudaEventRecord (hand-off)",
          s_.device);
  }

  void opened() override {}  // IPC handles open only while the allocation lives

 private:
  void create(int slots) {
    check(cudaSetDevice(s_.device), "cudaSetDevice", s_.device);
    check(cudaMalloc(&h_.base, static_cast<std::size_t>(slots) * h_.slotBytes), "cudaMalloc (hand-off ring)",
          s_.device);
    slots_.resize(static_cast<std::size_t>(slots));
    for (auto& slot : slots_) {
      check(cudaEventCreateWithFlags(&slot.event, kStreamOrderEvent | cudaEventInterprocess),
            "cudaEventCreateWithFlags (interprocess)", s_.device);
      check(cudaIpcGetEventHandle(&slot.ipc, slot.event), "cudaIpcGetEventHandle", s_.device);
    }
    check(cudaIpcGetMemHandle(&h_.memory, h_.base), "cudaIpcGetMemHandle", s_.device);
  }

  // Peers' reads completed before the compute that read them, which their ranks waited for before the runtime
  // ended; the compute stream may still be writing (a blocking wait: Note [Blocking host waits]).
  void release() noexcept {
    cudaSetDevice(s_.device);
    waitForStream(s_.compute);
    for (auto& slot : slots_) {
      if (slot.event) cudaEventDestroy(slot.event);
    }
    slots_.clear();
    if (h_.base) cudaFree(h_.base);
    h_.base = nullptr;
  }

  RingStreams s_;
  Header h_;
  std::vector<SlotHandle> slots_;
};

class CudaPeerRing : public PeerRing {
 public:
  CudaPeerRing(RingStreams streams, const std::string& handle) : s_(std::move(streams)) {
    RP_CHECK(handle.size() >= sizeof(Header), "a CUDA hand-off ring handle of {} bytes", handle.size());
    std::memcpy(&h_, handle.data(), sizeof(Header));
    RP_CHECK(h_.magic == kMagic && h_.slots > 0 &&
                 handle.size() == sizeof(Header) + static_cast<std::size_t>(h_.slots) * sizeof(SlotHandle),
             "a malformed CUDA hand-off ring handle ({} bytes)", handle.size());
    std::vector<SlotHandle> slots(static_cast<std::size_t>(h_.slots));
    std::memcpy(slots.data(), handle.data() + sizeof(Header), slots.size() * sizeof(SlotHandle));
    check(cudaSetDevice(s_.device), "cudaSetDevice", s_.device);
    sameProcess_ = h_.pid == ::getpid();
    if (sameProcess_) {
      base_ = h_.base;
      for (const auto& slot : slots) events_.push_back(slot.event);
      return;
    }
    void* base = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&base, h_.memory, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();
      RP_THROW(SystemError,
               "cudaIpcOpenMemHandle of process {}'s hand-off ring (CUDA device {}) on device {}: {} ({}); {}", h_.pid,
               h_.device, s_.device, cudaGetErrorName(err), cudaGetErrorString(err), ipcAdvice());
    }
    base_ = static_cast<std::uint8_t*>(base);
    for (const auto& slot : slots) {
      cudaEvent_t event = nullptr;
      check(cudaIpcOpenEventHandle(&event, slot.ipc), "cudaIpcOpenEventHandle", s_.device);
      events_.push_back(event);
    }
  }

  ~CudaPeerRing() override {
    if (sameProcess_) return;
    cudaSetDevice(s_.device);
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    if (base_) cudaIpcCloseMemHandle(base_);
  }

  Ticket read(int slot, void* dst, std::size_t bytes) override {
    const std::uint8_t* src = slotAt(base_, h_, slot, bytes);
    Ticket t;
    s_.afterCompute(s_.upload);  // `dst` may be a block the compute still reads
    check(cudaStreamWaitEvent(s_.upload, events_[static_cast<std::size_t>(slot)], 0), "cudaStreamWaitEvent (hand-off)",
          s_.device);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_.upload), "cudaMemcpyAsync (hand-off)", s_.device);
    completeWhenReached(s_.upload, t, s_.device);
    return t;
  }

 private:
  RingStreams s_;
  Header h_;
  bool sameProcess_ = false;
  std::uint8_t* base_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<HandoffRing> shareCudaRing(const RingStreams& streams, int slots, std::size_t slotBytes) {
  return std::make_unique<CudaRing>(streams, slots, slotBytes);
}

std::unique_ptr<PeerRing> openCudaRing(const RingStreams& streams, const std::string& handle) {
  return std::make_unique<CudaPeerRing>(streams, handle);
}

}  // namespace rp::device::cuda
