// The peer-links tensor backend (docs/protocol.md, "Peer links"): a stage's hand-off to the next job's worker
// goes over the workers' point-to-point links (Worker::joinLinks; CUDA: NCCL send/receive, GPU to GPU), while
// saved stage inputs, read much later by a backward job, and hand-offs to the same worker go through the host
// arena as on the host-staged backend.
//
// Note [Link order]: each ordered pair of ranks is a FIFO, so a consumer must receive a producer's hand-offs in
// the order they were sent. Both sides follow the iteration's job order: a producer sends job k's microbatches
// in order, then its later jobs'; the consumer, which runs job k+1 after its earlier jobs and before its later
// ones, receives them in that order (1F1B: each direction carries one kind, in microbatch order). Every
// hand-off is received, even one the consumer does not need (a frozen embedding stage's gradient). The CPU links
// check every receive against its send's tag (the tensor's id), so the in-process tier proves the order holds.
// A send returns before it is received (the readiness message follows it at once), so no rank waits for a
// receiver that waits for its readiness. Send slots are Note [Hand-off slots]'s, and reused on the same terms.
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "common/error.h"
#include "transport/tensor_channel.h"

namespace rp::transport {
namespace {

constexpr int kSlotsPerMicrobatch = 4;  // 2 parities x 2 kinds, as the device-direct ring

class PeerLinkChannel : public TensorChannel {
 public:
  explicit PeerLinkChannel(const TensorChannelContext& c)
      : arena_(hostStaged(c)), rank_(c.node.rank()), microbatches_(c.microbatches), tensorBytes_(c.tensorBytes) {
    // Collective: node rank 0 makes the links' id and every rank learns it; then all learn whether any failed.
    std::string error, id;
    try {
      if (rank_ == 0) id = c.worker.linksId();
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::uint64_t size = id.size();
    c.node.broadcast(&size, sizeof(size), 0);
    id.resize(size);
    if (size > 0) c.node.broadcast(id.data(), size, 0);
    if (size > 0) {
      try {
        links_ = c.worker.joinLinks(id, rank_, c.node.size(), kSlotsPerMicrobatch * microbatches_, tensorBytes_);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    std::int32_t failed = error.empty() && size > 0 ? 0 : rank_ + 1;
    c.node.allreduce(&failed, 1, control::Reduce::kMax);
    if (!error.empty()) {
      RP_THROW(SystemError, "rank {}: the peer-link tensor channel could not be set up: {}", rank_, error);
    }
    if (failed > 0) {
      RP_THROW(SystemError,
               "rank {}: the peer-link tensor channel could not be set up on rank {} (its error names why)", rank_,
               failed - 1);
    }
  }

  void put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) override {
    const bool handOff = readers.next >= 0 && readers.next != rank_;
    if (handOff) links_->send(readers.next, slotOf(id, bytes), src, bytes, tagOf(id));
    if (!handOff || readers.saved) arena_->put(id, src, bytes, readers);
  }

  void get(const TensorId& id, void* dst, std::size_t bytes, int writer) override {
    if (writer == kSaved || writer == rank_) {
      arena_->get(id, dst, bytes, writer);
      return;
    }
    links_->receive(writer, dst, bytes, tagOf(id)).wait();
  }

  void signal(int to, const control::StageReady& ready) override { arena_->signal(to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    arena_->await(from, expected, describe);
  }

 private:
  int slotOf(const TensorId& id, std::size_t bytes) const {
    RP_CHECK(bytes == tensorBytes_ && id.microbatch >= 0 && id.microbatch < microbatches_,
             "hand-off (layer {}, mb {}) of {} bytes; the links hold {} microbatches of {} bytes", id.layer,
             id.microbatch, bytes, microbatches_, tensorBytes_);
    const int kind = id.kind == TensorKind::kActivation ? 0 : 1;
    return (static_cast<int>(id.step % 2) * 2 + kind) * microbatches_ + id.microbatch;
  }

  // The tensor's id in one word (step, layer, microbatch, kind), for the links that check the order.
  static std::uint64_t tagOf(const TensorId& id) {
    return (static_cast<std::uint64_t>(id.step) << 40) ^ (static_cast<std::uint64_t>(id.layer) << 20) ^
           (static_cast<std::uint64_t>(id.microbatch) << 1) ^ (id.kind == TensorKind::kGradient ? 1U : 0U);
  }

  std::unique_ptr<TensorChannel> arena_;  // saved tensors, hand-offs to this rank, readiness
  int rank_;
  int microbatches_;
  std::size_t tensorBytes_;
  std::unique_ptr<device::PeerLinks> links_;
};

}  // namespace

std::unique_ptr<TensorChannel> peerLinks(const TensorChannelContext& context) {
  return std::make_unique<PeerLinkChannel>(context);
}

}  // namespace rp::transport
