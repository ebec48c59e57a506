#include "engine/stage_slots.h"

#include <algorithm>
#include <cstdint>

#include "common/error.h"

namespace rp::engine {
namespace {

constexpr std::size_t kAlign = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

std::size_t StageSlots::stageBytes(const PipelineModel& model, const schedule::Range& layers) {
  std::size_t total = 0;
  for (int i : model.tensorsOf(layers.begin, layers.end)) total += aligned(model.bytes(i));
  return total;
}

std::size_t StageSlots::largestStage(const PipelineModel& model, const schedule::Plan& plan) {
  std::size_t most = stageBytes(model, plan.fused);
  for (const auto& r : plan.forward) most = std::max(most, stageBytes(model, r));
  for (const auto& r : plan.backward) most = std::max(most, stageBytes(model, r));
  return most;
}

void StageSlots::fit(PipelineModel& model, const schedule::Plan& plan) {
  const std::size_t bytes = largestStage(model, plan);
  if (bytes == bytes_ && slots_[0]) return;
  model.unbindAll();
  slots_[0].reset();
  slots_[1].reset();
  bytes_ = bytes;
  slots_[0] = worker_.allocate(bytes_);
  slots_[1] = worker_.allocate(bytes_);
}

void StageSlots::bind(PipelineModel& model, const schedule::Range& layers, int slot) {
  RP_CHECK(slot == 0 || slot == 1, "stage slot {} (expected 0 or 1)", slot);
  RP_CHECK(slots_[slot], "stage slots are not allocated (fit() first)");
  auto* base = static_cast<std::uint8_t*>(slots_[slot].get());
  std::size_t offset = 0;
  for (int i : model.tensorsOf(layers.begin, layers.end)) {
    RP_CHECK(offset + model.bytes(i) <= bytes_, "stage {}-{} does not fit its slot of {} bytes", layers.begin,
             layers.end - 1, bytes_);
    model.bind(i, base + offset, slots_[slot]);
    offset += aligned(model.bytes(i));
  }
}

}  // namespace rp::engine
