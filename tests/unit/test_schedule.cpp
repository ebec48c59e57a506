// Plans, the partitioner and round-robin dispatch: pure functions on synthetic profiles.
#include <gtest/gtest.h>

#include "support/layer_costs.h"

#include "common/error.h"
#include "schedule/dispatch.h"
#include "schedule/partitioner.h"
#include "schedule/plan.h"

namespace rp::schedule {
namespace {

std::string errorOf(const Plan& p, int L) {
  try {
    validate(p, L, "pipeline.plan");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Plan, FormatIsTheInverseOfParse) {
  const Plan p = parsePlan("3,2 | 2 | 2,3", 8, "test");
  EXPECT_EQ(formatPlan(p), "3,2 | 2 | 2,3");
  EXPECT_EQ(parsePlan(formatPlan(p), 8, "test"), p);
}

TEST(Plan, ParsesTheConfigForm) {
  EXPECT_EQ(parsePlan("2,2 | 1 | 1,1,1,1", 6, "pipeline.plan"), planFromCounts({2, 2}, 1, {1, 1, 1, 1}, 6));
  try {
    parsePlan("2,x | 1 | 4", 6, "pipeline.plan");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.plan = \"2,x | 1 | 4\": 'x' is not a layer count"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parsePlan("2 | 1", 6, "pipeline.plan"), InputError);
  EXPECT_THROW(parsePlan("2 | 1 | 2", 6, "pipeline.plan"), InputError);  // does not cover the layers
}

TEST(Plan, ValidationNamesTheBrokenRule) {
  const Plan good = planFromCounts({2, 2}, 1, {1, 1, 1, 1}, 6);
  EXPECT_EQ(good.fused, (Range{4, 6}));
  EXPECT_EQ(good.backward.front(), (Range{3, 4}));
  EXPECT_EQ(errorOf(good, 6), "no error");
  EXPECT_EQ(describe(good), "fwd 0-1,2-3 | fused 4-5 | bwd 3,2,1,0");

  Plan gap = good;
  gap.forward[1] = {3, 4};
  EXPECT_NE(errorOf(gap, 6).find("forward stages must be non-empty and consecutive"), std::string::npos);
  Plan shortBwd = planFromCounts({2, 2}, 1, {1, 1, 1}, 6);
  EXPECT_NE(errorOf(shortBwd, 6).find("backward stages, read shallowest first"), std::string::npos)
      << errorOf(shortBwd, 6);
  Plan noHead = good;
  noHead.fused = {4, 5};
  EXPECT_NE(errorOf(noHead, 6).find("the fused stage must end at the head"), std::string::npos);
  Plan shortFwd = planFromCounts({2, 1}, 1, {1, 1, 1, 1}, 6);
  EXPECT_NE(errorOf(shortFwd, 6).find("forward stages cover [0, 3) but the fused stage starts at 4"), std::string::npos)
      << errorOf(shortFwd, 6);
}

using test::uniformLayerCosts;

// An LM head worth three decoder layers: the fused stage holds the head alone, the forward stages carry
// about three times the layers of the backward stages (the asymmetry the schedule relies on).
TEST(Partitioner, HeavyHeadGetsItsOwnFusedStageAndStagesAreAsymmetric) {
  const auto result = partition(uniformLayerCosts(8, 3.0), {4, 1.1, 0.0});
  const Plan& p = result.plan;
  EXPECT_EQ(p.fused, (Range{9, 10})) << describe(p);
  EXPECT_DOUBLE_EQ(result.stageTimeLimit, 6.0) << describe(p);  // W = head backward = 6
  for (const auto& r : p.backward) EXPECT_LE(r.size(), 3) << describe(p);
  int fwdLayers = 0;
  for (const auto& r : p.forward) fwdLayers = std::max(fwdLayers, r.size());
  EXPECT_GE(fwdLayers, 6) << describe(p);
  EXPECT_DOUBLE_EQ(result.objective, std::max(p.stageCount(), 4) * result.stageTimeLimit);
  EXPECT_LE(planObjective(p, uniformLayerCosts(8, 3.0), 4), result.objective);  // the real slowest stage is within T
  EXPECT_NO_THROW(validate(p, 10, "test"));
}

TEST(Partitioner, MemoryCapSplitsStages) {
  LayerCosts c = uniformLayerCosts(6, 1.0);
  const auto unlimited = partition(c, {2, 1.1, 0.0});
  const auto capped = partition(c, {2, 1.1, 6.0});  // half = 3 bytes: at most 3 forward / 1 backward layers
  for (const auto& r : capped.plan.forward) EXPECT_LE(r.size(), 3) << describe(capped.plan);
  for (const auto& r : capped.plan.backward) EXPECT_LE(r.size(), 1) << describe(capped.plan);
  EXPECT_GE(capped.plan.stageCount(), unlimited.plan.stageCount());
  EXPECT_FALSE(capped.memoryLimitRaised);
  EXPECT_TRUE(partition(c, {2, 1.1, 2.0}).memoryLimitRaised);  // half of 2 < the largest layer's 2 bytes
}

TEST(Dispatch, RoundRobinContinuesAcrossIterations) {
  const Plan p = planFromCounts({3, 4}, 0, {3, 2, 2}, 8);
  ASSERT_NO_THROW(validate(p, 8, "test"));
  const auto first = dispatch(p, 3, 0);
  ASSERT_EQ(first.jobs.size(), 6u);
  EXPECT_EQ(first.jobs[0].kind, JobKind::kForward);
  EXPECT_EQ(first.jobs[2].kind, JobKind::kFused);
  EXPECT_EQ(first.jobs[3].kind, JobKind::kBackward);
  EXPECT_EQ(first.jobs[3].layers, (Range{4, 7}));  // deepest backward first
  for (std::size_t k = 0; k < first.jobs.size(); ++k) EXPECT_EQ(first.jobs[k].worker, static_cast<int>(k % 3));
  const auto second = dispatch(p, 4, first.counterEnd);
  EXPECT_EQ(first.counterEnd, 6);
  EXPECT_EQ(second.jobs[0].worker, 6 % 4);
  EXPECT_EQ(second.jobs[5].worker, 11 % 4);
}

TEST(Baselines, BalancedBoundPlanAndOneFOneBOrder) {
  LayerCosts c = uniformLayerCosts(6, 3.0);  // L = 8; the head costs three layers
  const Plan p = balancedBoundPlan(c, 3);
  ASSERT_EQ(p.forward.size(), 2u);
  EXPECT_EQ(p.fused.end, 8);
  EXPECT_EQ(p.backward.front(), p.forward.back());  // mirrored
  EXPECT_LE(p.fused.size(), 2) << describe(p);      // the heavy head gets a short last stage
  const auto table = dispatchBound(p, 3);
  EXPECT_EQ(table.jobs[0].worker, 0);
  EXPECT_EQ(table.jobs[2].kind, JobKind::kFused);
  EXPECT_EQ(table.jobs[2].worker, 2);
  EXPECT_EQ(table.jobs[3].worker, 1);  // backward of stage 1
  EXPECT_EQ(table.jobs[4].worker, 0);
  // Worker 0 of 3 with 4 microbatches: 2 warm-up forwards, then 1F1B, then 2 backwards.
  const auto ops = oneFOneBOrder(table, 0, 4);
  std::vector<std::pair<std::int64_t, int>> got;
  for (const auto& op : ops) got.emplace_back(op.job, op.microbatch);
  EXPECT_EQ(
      got, (std::vector<std::pair<std::int64_t, int>>{{0, 0}, {0, 1}, {0, 2}, {4, 0}, {0, 3}, {4, 1}, {4, 2}, {4, 3}}));
  EXPECT_THROW(dispatchBound(p, 2), InputError);
}

}  // namespace
}  // namespace rp::schedule
