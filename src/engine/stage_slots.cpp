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

torch::Device torchDevice(const device::Placement& placement) {
  switch (placement.backend) {
    case device::Backend::kCuda:
      return {torch::kCUDA, static_cast<c10::DeviceIndex>(placement.index)};
    case device::Backend::kEmulated:
      return torch::kMeta;  // Note [Emulated device]: shapes only
    case device::Backend::kCpu:
      break;
  }
  return torch::kCPU;
}

std::size_t StageSlots::stageBytes(const PipelineModel& model, const schedule::Range& layers) {
  std::size_t total = 0;
  for (int i : model.tensorsOf(layers.begin, layers.end)) total += aligned(model.bytes(i));
  return total;
}

schedule::Range StageSlots::largestStage(const PipelineModel& model, const schedule::Plan& plan) {
  schedule::Range largest = plan.fused;
  for (const auto* ranges : {&plan.forward, &plan.backward}) {
    for (const auto& r : *ranges) {
      if (stageBytes(model, r) > stageBytes(model, largest)) largest = r;
    }
  }
  return largest;
}

void StageSlots::fit(PipelineModel& model, const schedule::Plan& plan) {
  const schedule::Range largest = largestStage(model, plan);
  const std::size_t bytes = stageBytes(model, largest);
  if (bytes == bytes_ && slots_[0]) return;
  if (budget_ > 0 && 2.0 * static_cast<double>(bytes) > budget_) {
    RP_THROW(InputError,
             "stage {}-{} needs {:.1f} MB of weights on its worker, twice that with the prefetched stage: more than "
             "the {:.1f} MB budget (pipeline.memory_limit_gb, or the GPU's free memory less "
             "pipeline.memory_reserve_gb): use pipeline.plan = \"auto\" or a plan with smaller stages",
             largest.begin, largest.end - 1, static_cast<double>(bytes) / 1e6, budget_ / 1e6);
  }
  model.unbindAll();
  slots_[0].reset();
  slots_[1].reset();
  released_[0].reset();
  released_[1].reset();
  bytes_ = bytes;
  slots_[0] = worker_.allocate(bytes_);
  slots_[1] = worker_.allocate(bytes_);
  if (capped_) worker_.capComputeMemory(static_cast<std::size_t>(std::max(0.0, budget_ - 2.0 * bytes_)));
}

void StageSlots::bind(PipelineModel& model, const schedule::Range& layers, int slot) {
  const std::vector<std::uint8_t*> at = places(model, layers, slot);
  const std::vector<int> tensors = model.tensorsOf(layers.begin, layers.end);
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    model.bind(tensors[k], at[k], slots_[slot], torchDevice(worker_.placement()));
  }
}

void StageSlots::release(int slot, std::shared_ptr<device::ComputeMark> mark) {
  RP_CHECK(slot == 0 || slot == 1, "stage slot {} (expected 0 or 1)", slot);
  if (keepFirstMark_ && released_[slot]) return;
  released_[slot] = std::move(mark);
}

std::shared_ptr<device::ComputeMark> StageSlots::releasedAfter(int slot) const {
  RP_CHECK(slot == 0 || slot == 1, "stage slot {} (expected 0 or 1)", slot);
  return released_[slot];
}

std::vector<std::uint8_t*> StageSlots::places(const PipelineModel& model, const schedule::Range& layers,
                                              int slot) const {
  RP_CHECK(slot == 0 || slot == 1, "stage slot {} (expected 0 or 1)", slot);
  RP_CHECK(slots_[slot], "stage slots are not allocated (fit() first)");
  auto* base = static_cast<std::uint8_t*>(slots_[slot].get());
  std::vector<std::uint8_t*> at;
  std::size_t offset = 0;
  for (int i : model.tensorsOf(layers.begin, layers.end)) {
    RP_CHECK(offset + model.bytes(i) <= bytes_, "stage {}-{} does not fit its slot of {} bytes", layers.begin,
             layers.end - 1, bytes_);
    at.push_back(base + offset);
    offset += aligned(model.bytes(i));
  }
  return at;
}

}  // namespace rp::engine
