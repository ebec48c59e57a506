// The device-direct tensor backend (docs/protocol.md, "Device-direct"): a stage's hand-off to the next job's
// worker stays in worker memory — the producer writes it into its own ring (Worker::shareRing) and the
// consumer copies it from there (CUDA: its upload stream waits on the slot's interprocess event, no host
// round trip) — while saved stage inputs and hand-offs to the same worker go through the host arena
// (transport/hand_off.h).
//
// Note [Hand-off slots]: one slot per (iteration parity, kind, microbatch), so no credit messages. A producer
// rewrites slot (parity, kind, m) only in a later job of the same iteration parity; within an iteration that
// job's microbatch m starts after every earlier job's microbatch m has read its input (the readiness chain),
// and iteration t+2 cannot start before iteration t's backward has finished (Note [Layer fences]).
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/fault.h"
#include "transport/hand_off.h"

namespace rp::transport {
namespace {

class DeviceDirect : public HandOffChannel {
 public:
  explicit DeviceDirect(const TensorChannelContext& c)
      : HandOffChannel(c), worker_(c.worker), peers_(static_cast<std::size_t>(c.node.size())) {
    // Collective: every rank takes part in every exchange, then all learn whether any rank failed.
    std::string error;
    std::string mine;
    try {
      ring_ = worker_.shareRing(slots(c.microbatches), c.tensorBytes);
      mine = ring_->handle();
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (int r = 0; r < c.node.size(); ++r) {
      std::uint64_t size = r == rank() ? mine.size() : 0;
      c.node.broadcast(&size, sizeof(size), r);
      std::string handle = r == rank() ? mine : std::string(size, '\0');
      if (size > 0) c.node.broadcast(handle.data(), size, r);
      if (r == rank() || size == 0 || !error.empty()) continue;
      try {
        fault::maybeInject(rank(), 0, "open-ring");
        peers_[static_cast<std::size_t>(r)] = worker_.openRing(handle);
      } catch (const std::exception& e) {
        error = fmt::format("opening rank {}'s ring: {}", r, e.what());
      }
    }
    agreeOnSetUp(c.node, error, "device-direct");
    ring_->opened();
  }

 private:
  void handOff(int, int slot, const TensorId&, const void* src, std::size_t bytes) override {
    ring_->write(slot, src, bytes);
  }

  device::Ticket takeIn(int writer, int slot, const TensorId&, void* dst, std::size_t bytes) override {
    RP_CHECK(writer < static_cast<int>(peers_.size()) && peers_[static_cast<std::size_t>(writer)],
             "a hand-off from rank {}, which has no ring here", writer);
    return peers_[static_cast<std::size_t>(writer)]->read(slot, dst, bytes);
  }

  device::Worker& worker_;
  std::unique_ptr<device::HandoffRing> ring_;
  std::vector<std::unique_ptr<device::PeerRing>> peers_;  // by node rank; none for this rank
};

}  // namespace

std::unique_ptr<TensorChannel> deviceDirect(const TensorChannelContext& context) {
  return std::make_unique<DeviceDirect>(context);
}

}  // namespace rp::transport
