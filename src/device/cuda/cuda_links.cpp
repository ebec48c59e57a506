// The CUDA backend's peer links (device/worker.h, PeerLinks) over NCCL: one communicator per ordered pair of
// the node's ranks (split from one over all of them), each with a stream of its own, so a direction is a FIFO
// that never waits behind the other direction or another pair — a pair's sends are received in their order,
// and a send blocked until its receiver gets there holds up nothing else. A send first copies the tensor
// into the sender's slot on the compute stream (after the compute that produced it, and after the slot's
// previous send was received), so the caller may reuse its memory at once; the pair's stream sends from the
// slot once that copy is done. A receive waits for the compute submitted before it (its destination may be a
// block the caching allocator just recycled). NCCL needs one GPU per rank.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "device/cuda/cuda_common.h"

#if RP_WITH_NCCL
#include <nccl.h>
#endif

namespace rp::device::cuda {

#if RP_WITH_NCCL
namespace {

void checkNccl(ncclResult_t result, const char* call, int device) {
  if (result == ncclSuccess) return;
  RP_THROW(SystemError, "{} on CUDA device {} failed: {} ({})", call, device, ncclGetErrorString(result),
           ncclGetLastError(nullptr));
}

class CudaLinks : public PeerLinks {
 public:
  CudaLinks(const RingStreams& streams, const std::string& id, int rank, int ranks, int slots, std::size_t slotBytes)
      : s_(streams), rank_(rank), slots_(slots), slotBytes_(slotBytes), sendTo_(ranks), receiveFrom_(ranks) {
    RP_CHECK(id.size() == NCCL_UNIQUE_ID_BYTES, "an NCCL unique id of {} bytes, expected {}", id.size(),
             NCCL_UNIQUE_ID_BYTES);
    try {
      join(id, rank, ranks, slots, slotBytes);
    } catch (...) {
      release();  // what was made before the failure
      throw;
    }
  }

  // Aborting never waits for a peer that may be gone; after a finished run nothing is in flight.
  ~CudaLinks() override { release(); }

  void send(int peer, int slot, const void* src, std::size_t bytes, std::uint64_t) override {
    const Pair& pair = pairOf(sendTo_, peer, "send to");
    RP_CHECK(slot >= 0 && slot < slots_ && bytes <= slotBytes_, "link slot {} of {} bytes ({} slots of {} bytes)", slot,
             bytes, slots_, slotBytes_);
    void* buffer = static_cast<std::uint8_t*>(buffer_) + static_cast<std::size_t>(slot) * slotBytes_;
    const auto k = static_cast<std::size_t>(slot);
    check(cudaStreamWaitEvent(s_.compute, sent_[k], 0), "cudaStreamWaitEvent (link slot)", s_.device);
    check(cudaMemcpyAsync(buffer, src, bytes, cudaMemcpyDeviceToDevice, s_.compute), "cudaMemcpyAsync (link slot)",
          s_.device);
    check(cudaEventRecord(staged_[k], s_.compute), "cudaEventRecord", s_.device);
    check(cudaStreamWaitEvent(pair.stream, staged_[k], 0), "cudaStreamWaitEvent (link)", s_.device);
    checkNccl(ncclSend(buffer, bytes, ncclUint8, 1, pair.comm, pair.stream), "ncclSend", s_.device);
    check(cudaEventRecord(sent_[k], pair.stream), "cudaEventRecord", s_.device);
  }

  Ticket receive(int peer, void* dst, std::size_t bytes, std::uint64_t) override {
    const Pair& pair = pairOf(receiveFrom_, peer, "receive from");
    s_.afterCompute(pair.stream);
    checkNccl(ncclRecv(dst, bytes, ncclUint8, 0, pair.comm, pair.stream), "ncclRecv", s_.device);
    Ticket t;
    completeWhenReached(pair.stream, t, s_.device);
    return t;
  }

 private:
  void join(const std::string& id, int rank, int ranks, int slots, std::size_t slotBytes) {
    check(cudaSetDevice(s_.device), "cudaSetDevice", s_.device);
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id.data(), NCCL_UNIQUE_ID_BYTES);
    checkNccl(ncclCommInitRank(&all_, ranks, unique, rank), "ncclCommInitRank", s_.device);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange", s_.device);
    // Every rank takes part in every split, in the same order; pair (i -> j) has i as its rank 0, j as rank 1.
    for (int i = 0; i < ranks; ++i) {
      for (int j = 0; j < ranks; ++j) {
        if (i == j) continue;
        const bool member = rank == i || rank == j;
        ncclComm_t comm = nullptr;
        checkNccl(ncclCommSplit(all_, member ? i * ranks + j : NCCL_SPLIT_NOCOLOR, rank == i ? 0 : 1, &comm, nullptr),
                  "ncclCommSplit", s_.device);
        if (!member) continue;
        Pair& pair = rank == i ? sendTo_[static_cast<std::size_t>(j)] : receiveFrom_[static_cast<std::size_t>(i)];
        pair.comm = comm;
        check(cudaStreamCreateWithPriority(&pair.stream, cudaStreamNonBlocking, greatest), "cudaStreamCreate (link)",
              s_.device);
      }
    }
    check(cudaMalloc(&buffer_, std::max<std::size_t>(1, static_cast<std::size_t>(slots) * slotBytes)),
          "cudaMalloc (link slots)", s_.device);
    staged_.resize(static_cast<std::size_t>(slots));
    sent_.resize(static_cast<std::size_t>(slots));
    for (int k = 0; k < slots; ++k) {
      check(cudaEventCreateWithFlags(&staged_[static_cast<std::size_t>(k)], kStreamOrderEvent), "cudaEventCreate",
            s_.device);
      check(cudaEventCreateWithFlags(&sent_[static_cast<std::size_t>(k)], kStreamOrderEvent), "cudaEventCreate",
            s_.device);
    }
  }

  void release() {
    cudaSetDevice(s_.device);
    for (auto* pairs : {&sendTo_, &receiveFrom_}) {
      for (Pair& pair : *pairs) {
        if (pair.comm) ncclCommAbort(pair.comm);
        if (pair.stream) cudaStreamDestroy(pair.stream);
      }
    }
    if (all_) ncclCommAbort(all_);
    for (auto* events : {&staged_, &sent_}) {
      for (cudaEvent_t e : *events) {
        if (e) cudaEventDestroy(e);
      }
    }
    if (buffer_) cudaFree(buffer_);
  }

  struct Pair {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  const Pair& pairOf(const std::vector<Pair>& pairs, int peer, const char* what) const {
    RP_CHECK(peer >= 0 && peer < static_cast<int>(pairs.size()) && peer != rank_, "rank {}: a link to {} rank {} of {}",
             rank_, what, peer, pairs.size());
    return pairs[static_cast<std::size_t>(peer)];
  }

  RingStreams s_;
  int rank_, slots_;
  std::size_t slotBytes_;
  ncclComm_t all_ = nullptr;
  std::vector<Pair> sendTo_, receiveFrom_;  // by peer
  void* buffer_ = nullptr;                  // the send slots
  std::vector<cudaEvent_t> staged_, sent_;  // per slot: copied into it; its send received
};

}  // namespace

std::string cudaLinksId() {
  ncclUniqueId id{};
  checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", -1);
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

std::unique_ptr<PeerLinks> joinCudaLinks(const RingStreams& streams, const std::string& id, int rank, int ranks,
                                         int slots, std::size_t slotBytes) {
  return std::make_unique<CudaLinks>(streams, id, rank, ranks, slots, slotBytes);
}

#else

namespace {
[[noreturn]] void noNccl() {
  RP_THROW(InputError,
           "pipeline.tensor_channel = \"nccl\": this build has no NCCL (configured with RP_WITH_NCCL=OFF); use "
           "\"host\" or \"direct\", or rebuild with NCCL");
}
}  // namespace

std::string cudaLinksId() {
  noNccl();
}

std::unique_ptr<PeerLinks> joinCudaLinks(const RingStreams&, const std::string&, int, int, int, std::size_t) {
  noNccl();
}

#endif

}  // namespace rp::device::cuda
