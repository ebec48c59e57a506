// Note [Slot release] (engine/stage_slots.h): which compute a copy into a stage slot must wait for. The device
// side of it — a copy ordered after an earlier mark lands while later compute runs — is
// CudaStreamOrder.AWeightCopyWaitsOnlyForTheMarkItIsGiven (tests/gpu).
#include <gtest/gtest.h>

#include <memory>

#include "common/error.h"
#include "device/worker.h"
#include "engine/pipeline_model.h"
#include "engine/stage_slots.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "schedule/plan.h"

namespace rp::engine {
namespace {

PipelineModel tinyModel() {
  model::ModelConfig c;
  c.vocabSize = 40;
  c.hiddenSize = 16;
  c.intermediateSize = 24;
  c.numLayers = 4;
  c.numHeads = 2;
  c.numKvHeads = 1;
  c.headDim = 8;
  c.maxPositions = 32;
  return PipelineModel(std::make_shared<model::CausalLM>(c, torch::kFloat, /*allocate=*/false), {});
}

TEST(StageSlots, ACopyIntoASlotWaitsForTheLastJobThatComputedInIt) {
  auto worker = device::makeWorker(device::Backend::kCpu, device::WorkerOptions{});
  PipelineModel model = tinyModel();  // pipeline layers 0 (embedding) .. 5 (head)
  StageSlots slots(*worker);
  slots.fit(model, schedule::parsePlan("1,2 | 2 | 2,1", model.layerCount(), "test"));
  EXPECT_EQ(slots.releasedAfter(0), nullptr) << "no job has computed in a fresh slot";
  EXPECT_EQ(slots.releasedAfter(1), nullptr);

  const auto job1 = worker->mark(), job2 = worker->mark(), job3 = worker->mark();
  slots.release(0, job1);
  slots.release(1, job2);
  slots.release(0, job3);  // the slot's latest job, not its first
  EXPECT_EQ(slots.releasedAfter(0), job3);
  EXPECT_EQ(slots.releasedAfter(1), job2);

  // A plan whose largest stage is as large keeps the slots, and what last computed in them.
  slots.fit(model, schedule::parsePlan("1,2 | 2 | 2,1", model.layerCount(), "test"));
  EXPECT_EQ(slots.releasedAfter(0), job3);
  // New slots (a larger stage): memory no job has used.
  slots.fit(model, schedule::parsePlan("1 | 4 | 1", model.layerCount(), "test"));
  EXPECT_EQ(slots.releasedAfter(0), nullptr);
  EXPECT_EQ(slots.releasedAfter(1), nullptr);
  EXPECT_THROW(slots.release(2, job1), InternalError);
}

}  // namespace
}  // namespace rp::engine
