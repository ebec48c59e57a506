// What the device hand-off backends (direct/, peer/) share: a stage's hand-off to another rank's next job
// goes from device to device, one slot per (iteration parity, kind, microbatch) on the producer (Note
// [Hand-off slots], device_direct.cpp), while saved stage inputs, read much later by a backward job, hand-offs
// to the same rank and readiness go through the host arena as on the host-staged backend. A backend says how
// a slot goes out (handOff) and how the consumer takes it in (takeIn).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/tensor_channel.h"

namespace rp::transport {

class HandOffChannel : public TensorChannel {
 public:
  explicit HandOffChannel(const TensorChannelContext& c);
  device::Ticket put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) final;
  device::Ticket get(const TensorId& id, void* dst, std::size_t bytes, int writer) final;
  void signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after) final {
    arena_->signal(to, ready, std::move(after));
  }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) final {
    arena_->await(from, expected, describe);
  }
  // The slots a rank's hand-offs take: 2 iteration parities x 2 kinds x the microbatches.
  static int slots(int microbatches) { return 4 * microbatches; }

 protected:
  // Hands tensor `id` (`bytes` at `src`, in slot `slot`) to rank `to`; `src` may be reused when it returns, and
  // the peer's takeIn, issued after this rank's readiness message, sees the bytes (the device orders it).
  virtual void handOff(int to, int slot, const TensorId& id, const void* src, std::size_t bytes) = 0;
  // Copies the hand-off `writer` made of tensor `id` (its slot `slot`) into `dst`; returns the copy's completion.
  virtual device::Ticket takeIn(int writer, int slot, const TensorId& id, void* dst, std::size_t bytes) = 0;
  int rank() const { return rank_; }
  // Ends a collective set-up: every rank learns whether any failed (`error` non-empty); the one that failed
  // throws its error, the others a SystemError naming it; `channel` names the backend.
  void agreeOnSetUp(control::ControlChannel& node, const std::string& error, const char* channel) const;

 private:
  int slotOf(const TensorId& id, std::size_t bytes) const;

  std::unique_ptr<TensorChannel> arena_;  // saved tensors, hand-offs to this rank, readiness
  int rank_;
  int microbatches_;
  std::size_t tensorBytes_;
};

}  // namespace rp::transport
