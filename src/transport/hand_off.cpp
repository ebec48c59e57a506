#include "transport/hand_off.h"

#include "common/error.h"

namespace rp::transport {

HandOffChannel::HandOffChannel(const TensorChannelContext& c)
    : arena_(hostStaged(c)), rank_(c.node.rank()), microbatches_(c.microbatches), tensorBytes_(c.tensorBytes) {}

device::Ticket HandOffChannel::put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) {
  const bool handOff = readers.next >= 0 && readers.next != rank_;
  if (handOff) this->handOff(readers.next, slotOf(id, bytes), id, src, bytes);
  return !handOff || readers.saved ? arena_->put(id, src, bytes, readers) : device::Ticket();
}

device::Ticket HandOffChannel::get(const TensorId& id, void* dst, std::size_t bytes, int writer) {
  if (writer == kSaved || writer == rank_) return arena_->get(id, dst, bytes, writer);
  return takeIn(writer, slotOf(id, bytes), id, dst, bytes);
}

void HandOffChannel::agreeOnSetUp(control::ControlChannel& node, const std::string& error, const char* channel) const {
  std::int32_t failed = error.empty() ? 0 : rank_ + 1;
  node.allreduce(&failed, 1, control::Reduce::kMax);
  if (!error.empty())
    RP_THROW(SystemError, "rank {}: the {} tensor channel could not be set up: {}", rank_, channel, error);
  if (failed > 0) {
    RP_THROW(SystemError, "rank {}: the {} tensor channel could not be set up on rank {} (its error names why)", rank_,
             channel, failed - 1);
  }
}

int HandOffChannel::slotOf(const TensorId& id, std::size_t bytes) const {
  RP_CHECK(bytes == tensorBytes_ && id.microbatch >= 0 && id.microbatch < microbatches_,
           "hand-off (layer {}, mb {}) of {} bytes; the slots hold {} microbatches of {} bytes", id.layer,
           id.microbatch, bytes, microbatches_, tensorBytes_);
  const int kind = id.kind == TensorKind::kActivation ? 0 : 1;
  return (static_cast<int>(id.step % 2) * 2 + kind) * microbatches_ + id.microbatch;
}

std::size_t handOffSlotBytes(int microbatches, std::size_t tensorBytes) {
  return static_cast<std::size_t>(HandOffChannel::slots(microbatches)) * tensorBytes;
}

}  // namespace rp::transport
