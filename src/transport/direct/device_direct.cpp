// The device-direct tensor backend (docs/protocol.md, "Device-direct"): a stage's hand-off to the next job's
// worker stays in worker memory — the producer writes it into its own ring (Worker::shareRing) and the
// consumer copies it from there (CUDA: its upload stream waits on the slot's interprocess event, no host
// round trip) — while saved stage inputs, read much later by a backward job, and hand-offs to the same
// worker go through the host arena as on the host-staged backend.
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
#include "transport/tensor_channel.h"

namespace rp::transport {
namespace {

constexpr int kSlotsPerMicrobatch = 4;  // 2 parities x 2 kinds

class DeviceDirect : public TensorChannel {
 public:
  explicit DeviceDirect(const TensorChannelContext& c)
      : worker_(c.worker),
        arena_(hostStaged(c)),
        rank_(c.node.rank()),
        microbatches_(c.microbatches),
        tensorBytes_(c.tensorBytes),
        peers_(static_cast<std::size_t>(c.node.size())) {
    // Collective: every rank takes part in every exchange, then all learn whether any rank failed.
    std::string error;
    std::string mine;
    try {
      ring_ = worker_.shareRing(kSlotsPerMicrobatch * microbatches_, tensorBytes_);
      mine = ring_->handle();
    } catch (const std::exception& e) {
      error = e.what();
    }
    for (int r = 0; r < c.node.size(); ++r) {
      std::uint64_t size = r == rank_ ? mine.size() : 0;
      c.node.broadcast(&size, sizeof(size), r);
      std::string handle = r == rank_ ? mine : std::string(size, '\0');
      if (size > 0) c.node.broadcast(handle.data(), size, r);
      if (r == rank_ || size == 0 || !error.empty()) continue;
      try {
        fault::maybeInject(rank_, 0, "open-ring");
        peers_[static_cast<std::size_t>(r)] = worker_.openRing(handle);
      } catch (const std::exception& e) {
        error = fmt::format("opening rank {}'s ring: {}", r, e.what());
      }
    }
    std::int32_t failed = error.empty() ? 0 : rank_ + 1;
    c.node.allreduce(&failed, 1, control::Reduce::kMax);
    if (!error.empty()) {
      RP_THROW(SystemError, "rank {}: the device-direct tensor channel could not be set up: {}", rank_, error);
    }
    if (failed > 0) {
      RP_THROW(SystemError,
               "rank {}: the device-direct tensor channel could not be set up on rank {} (its error names why)", rank_,
               failed - 1);
    }
    ring_->opened();
  }

  void put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) override {
    const bool handOff = readers.next >= 0 && readers.next != rank_;
    if (handOff) ring_->write(slotOf(id, bytes), src, bytes);
    if (!handOff || readers.saved) arena_->put(id, src, bytes, readers);
  }

  void get(const TensorId& id, void* dst, std::size_t bytes, int writer) override {
    if (writer == kSaved || writer == rank_) {
      arena_->get(id, dst, bytes, writer);
      return;
    }
    RP_CHECK(writer < static_cast<int>(peers_.size()) && peers_[static_cast<std::size_t>(writer)],
             "a hand-off from rank {}, which has no ring here", writer);
    peers_[static_cast<std::size_t>(writer)]->read(slotOf(id, bytes), dst, bytes).wait();
  }

  void signal(int to, const control::StageReady& ready) override { arena_->signal(to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    arena_->await(from, expected, describe);
  }

 private:
  int slotOf(const TensorId& id, std::size_t bytes) const {
    RP_CHECK(bytes == tensorBytes_ && id.microbatch >= 0 && id.microbatch < microbatches_,
             "hand-off (layer {}, mb {}) of {} bytes; the ring holds {} microbatches of {} bytes", id.layer,
             id.microbatch, bytes, microbatches_, tensorBytes_);
    const int kind = id.kind == TensorKind::kActivation ? 0 : 1;
    return (static_cast<int>(id.step % 2) * 2 + kind) * microbatches_ + id.microbatch;
  }

  device::Worker& worker_;
  std::unique_ptr<TensorChannel> arena_;  // saved tensors, hand-offs to this rank, readiness
  int rank_;
  int microbatches_;
  std::size_t tensorBytes_;
  std::unique_ptr<device::HandoffRing> ring_;
  std::vector<std::unique_ptr<device::PeerRing>> peers_;  // by node rank; none for this rank
};

}  // namespace

std::unique_ptr<TensorChannel> deviceDirect(const TensorChannelContext& context) {
  return std::make_unique<DeviceDirect>(context);
}

std::size_t handOffSlotBytes(int microbatches, std::size_t tensorBytes) {
  return static_cast<std::size_t>(kSlotsPerMicrobatch * microbatches) * tensorBytes;
}

}  // namespace rp::transport
