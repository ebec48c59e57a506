// Plans, the partitioner and round-robin dispatch: pure functions on synthetic profiles.
#include <gtest/gtest.h>

#include "support/layer_costs.h"

#include "common/error.h"
#include "schedule/dispatch.h"
#include "schedule/earliest_finish.h"
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

// Computed by hand: F [0,1) costs 1, the fused [1,3) 4, B [0,1) 2 per microbatch at speed 1; worker 1 at half
// speed. F: worker 0 finishes at 1 (worker 1: 2). Fused: worker 1 would start at 1 (F's first microbatch) and
// finish at 9, worker 0 at 5. B: worker 0 finishes at 7, worker 1 at 9. Round-robin would take 9 + 4.
TEST(Dispatch, EarliestFinishGivesEachJobToTheWorkerPredictedToFinishItFirst) {
  const Plan p = planFromCounts({1}, 1, {1}, 3);
  ASSERT_NO_THROW(validate(p, 3, "test"));
  DispatchCosts costs{{1, 1, 1}, {2, 2, 2}, {1.0, 0.5}, 1};
  WorkerClocks clocks;
  const DispatchTable table = dispatchEarliestFinish(p, costs, 0, clocks);
  const DispatchTable roundRobin = dispatch(p, 2, 0);
  ASSERT_EQ(table.jobs.size(), 3u);
  EXPECT_EQ(table.counterEnd, roundRobin.counterEnd);
  for (std::size_t k = 0; k < table.jobs.size(); ++k) {
    EXPECT_EQ(table.jobs[k].kind, roundRobin.jobs[k].kind);
    EXPECT_EQ(table.jobs[k].layers, roundRobin.jobs[k].layers);
    EXPECT_EQ(table.jobs[k].worker, 0) << "job " << k;
  }
  EXPECT_EQ(clocks.freeAt, (std::vector<double>{7.0, 0.0}));
  // Worker 0 busy until 7 at the next iteration: its F goes to worker 1 (2 against 8), the clocks restart at the
  // first free worker (worker 1's 0).
  const DispatchTable next = dispatchEarliestFinish(p, costs, table.counterEnd, clocks);
  EXPECT_EQ(next.jobs[0].worker, 1);
  EXPECT_EQ(next.counterEnd, 6);

  // Equal speeds and equal predictions: ties go to round-robin's pick.
  costs.speed = {1.0, 1.0};
  WorkerClocks idle;
  const DispatchTable tied = dispatchEarliestFinish(p, costs, 1, idle);
  EXPECT_EQ(tied.jobs[0].worker, 1);

  costs.speed = {1.0, 0.0};
  EXPECT_THROW((void)dispatchEarliestFinish(p, costs, 0, clocks), InputError);
  costs.speed = {1.0, 1.0};
  costs.forward = {1, 1};
  EXPECT_THROW((void)dispatchEarliestFinish(p, costs, 0, clocks), InputError);
}

// Over many iterations on a 4-worker plan, a worker at a quarter speed gets fewer jobs than round-robin gives
// it, and never the fused stage (the costliest job, which it would run four times as long); with equal speeds
// every worker keeps about an even share.
TEST(Dispatch, EarliestFinishSendsASlowWorkerFewerJobs) {
  const Plan p = planFromCounts({2, 2, 1}, 2, {2, 2, 1}, 8);
  ASSERT_NO_THROW(validate(p, 8, "test"));
  const int workers = 4, iterations = 20, jobs = 7;
  DispatchCosts costs{std::vector<double>(8, 1.0), std::vector<double>(8, 3.0), {1.0, 1.0, 0.25, 1.0}, 4};
  WorkerClocks uneven, even;
  DispatchCosts equal = costs;
  equal.speed.assign(workers, 1.0);
  std::vector<int> slowJobs(jobs, 0), evenShare(workers, 0);
  std::int64_t counter = 0;
  for (int i = 0; i < iterations; ++i) {
    const DispatchTable table = dispatchEarliestFinish(p, costs, counter, uneven);
    for (int k = 0; k < jobs; ++k) {
      slowJobs[static_cast<std::size_t>(k)] += table.jobs[static_cast<std::size_t>(k)].worker == 2 ? 1 : 0;
    }
    for (const Job& job : dispatchEarliestFinish(p, equal, counter, even).jobs) {
      ++evenShare[static_cast<std::size_t>(job.worker)];
    }
    counter = table.counterEnd;
  }
  int slow = 0;
  for (int n : slowJobs) slow += n;
  EXPECT_LT(slow, iterations * jobs / workers);  // round-robin's share: 35
  EXPECT_EQ(slowJobs[2], 0) << "the fused stage went to the slow worker";
  for (int w = 0; w < workers; ++w) {
    EXPECT_NEAR(evenShare[static_cast<std::size_t>(w)], iterations * jobs / workers, 5) << "worker " << w;
  }
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
