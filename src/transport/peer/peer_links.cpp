// The peer-links tensor backend (docs/protocol.md, "Peer links"): a stage's hand-off to the next job's worker
// goes over the workers' point-to-point links (Worker::joinLinks; CUDA: NCCL send/receive, GPU to GPU), while
// saved stage inputs, read much later by a backward job, and hand-offs to the same worker go through the host
// arena as on the host-staged backend (transport/hand_off.h).
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

#include "common/error.h"
#include "transport/hand_off.h"

namespace rp::transport {
namespace {

class PeerLinkChannel : public HandOffChannel {
 public:
  explicit PeerLinkChannel(const TensorChannelContext& c) : HandOffChannel(c) {
    // Collective: node rank 0 makes the links' id and every rank learns it; then all learn whether any failed.
    std::string error, id;
    try {
      if (rank() == 0) id = c.worker.linksId();
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::uint64_t size = id.size();
    c.node.broadcast(&size, sizeof(size), 0);
    id.resize(size);
    if (size > 0) {
      c.node.broadcast(id.data(), size, 0);
      try {
        links_ = c.worker.joinLinks(id, rank(), c.node.size(), slots(c.microbatches), c.tensorBytes);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    agreeOnSetUp(c.node, error, "peer-link");
  }

 private:
  void handOff(int to, int slot, const TensorId& id, const void* src, std::size_t bytes) override {
    links_->send(to, slot, src, bytes, tagOf(id));
  }

  device::Ticket takeIn(int writer, int, const TensorId& id, void* dst, std::size_t bytes) override {
    return links_->receive(writer, dst, bytes, tagOf(id));
  }

  // The tensor's id in one word (step, layer, microbatch, kind), for the links that check the order.
  static std::uint64_t tagOf(const TensorId& id) {
    return (static_cast<std::uint64_t>(id.step) << 40) ^ (static_cast<std::uint64_t>(id.layer) << 20) ^
           (static_cast<std::uint64_t>(id.microbatch) << 1) ^ (id.kind == TensorKind::kGradient ? 1U : 0U);
  }

  std::unique_ptr<device::PeerLinks> links_;
};

}  // namespace

std::unique_ptr<TensorChannel> peerLinks(const TensorChannelContext& context) {
  return std::make_unique<PeerLinkChannel>(context);
}

}  // namespace rp::transport
