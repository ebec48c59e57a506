// The host-staged tensor backend: a node-shared arena of one region per (step parity, layer, microbatch,
// kind); put copies worker memory into it, get copies it back (urgent on the worker's queue), readiness goes
// over the control channel. Double-buffered by iteration parity: iteration t+1's forward may run while
// iteration t's backward still reads its saved inputs (async mode; Note [Layer fences] bounds the overlap to
// two iterations in flight at any staleness).
#include <fmt/format.h>

#include "common/error.h"
#include "transport/readiness.h"

namespace rp::transport {
namespace {

std::string regionOf(const TensorId& id) {
  return fmt::format("{}/{}/{}/{}", id.kind == TensorKind::kActivation ? "act" : "gact", id.step % 2, id.layer,
                     id.microbatch);
}

class HostStaged : public TensorChannel {
 public:
  explicit HostStaged(const TensorChannelContext& c) : worker_(c.worker), readiness_(c.node, c.stall) {
    memory::StoreLayout layout;
    for (int parity = 0; parity < 2; ++parity) {
      for (int l = 1; l < c.layers; ++l) {
        for (int mb = 0; mb < c.microbatches; ++mb) {
          for (TensorKind kind : {TensorKind::kActivation, TensorKind::kGradient}) {
            layout.add(regionOf({parity, l, mb, kind}), c.tensorBytes);
          }
        }
      }
    }
    auto memory = c.nodeMemory(layout.total(), c.node, "arena");
    pin_ = c.worker.pinHost(memory->data(), layout.total(), "tensor arena");  // direct copies (cuda)
    arena_ = std::make_unique<memory::NodeStore>(std::move(layout), std::move(memory));
  }

  // Hand-offs and saved tensors alike live in the arena, so readers and writers do not matter here.
  device::Ticket put(const TensorId& id, const void* src, std::size_t bytes, const Readers&) override {
    return worker_.copyUrgent(region(id, bytes), src, bytes);
  }
  device::Ticket get(const TensorId& id, void* dst, std::size_t bytes, int) override {
    return worker_.copyUrgent(dst, region(id, bytes), bytes);
  }
  void signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after) override {
    readiness_.signal(to, ready, std::move(after));
  }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    readiness_.await(from, expected, describe);
  }

 private:
  std::uint8_t* region(const TensorId& id, std::size_t bytes) const {
    const std::string name = regionOf(id);
    RP_CHECK(arena_->layout().bytes(name) == bytes, "tensor {} has {} bytes, its arena region {}", name, bytes,
             arena_->layout().bytes(name));
    return arena_->bytes(name);
  }

  device::Worker& worker_;
  ControlReadiness readiness_;
  std::unique_ptr<memory::NodeStore> arena_;
  std::shared_ptr<void> pin_;  // released before arena_
};

}  // namespace

std::unique_ptr<TensorChannel> hostStaged(const TensorChannelContext& context) {
  return std::make_unique<HostStaged>(context);
}

}  // namespace rp::transport
