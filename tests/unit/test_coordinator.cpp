// The coordinator over the in-process channel (threads as ranks): rank 0's plan and dispatch table reach
// every rank, timing reports feed re-planning, and late peers are named.
#include <csignal>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/layer_costs.h"

#include "control/inproc/inproc_channel.h"
#include "coordinator/coordinator.h"
#include "schedule/partitioner.h"

namespace rp::coordinator {
namespace {

using schedule::LayerCosts;
using schedule::Plan;

using test::uniformLayerCosts;

template <typename Fn>
void onThreadsAsRanks(int ranks, Fn&& body) {
  control::InProcHub hub(ranks);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      control::InProcChannel channel(hub, r);
      try {
        body(channel);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST(Coordinator, EveryRankRunsRankZerosTableTheCounterContinuesAndAStopReachesAll) {
  const LayerCosts proxy = uniformLayerCosts(6, 3.0);
  const Plan plan = schedule::partition(proxy, {3, 1.1, 0}).plan;
  std::vector<std::vector<Directive>> got(3);
  onThreadsAsRanks(3, [&](control::ControlChannel& channel) {
    Coordination coordination(channel, {3, 1, true, 0, 0, {10.0, 10.0}}, plan, proxy);
    for (int step = 0; step < 4; ++step) {
      if (step == 3 && channel.rank() == 0) coordination.requestStop(SIGUSR1);  // e.g. a preemption signal
      got[static_cast<std::size_t>(channel.rank())].push_back(coordination.begin(step));
      if (step == 3 && channel.rank() == 0) {
        EXPECT_EQ(coordination.stopCause(), std::make_pair(SIGUSR1, 0));
      }
      coordination.report(step, std::vector<double>(8, 1.0), std::vector<double>(8, 2.0));
    }
  });
  std::int64_t counter = 0;
  for (int step = 0; step < 4; ++step) {
    const schedule::DispatchTable expected = schedule::dispatch(plan, 3, counter);
    counter = expected.counterEnd;
    for (int r = 0; r < 3; ++r) {
      const Directive& d = got[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)];
      EXPECT_EQ(d.step, step);
      EXPECT_EQ(d.plan, plan);
      EXPECT_EQ(d.table, expected) << "rank " << r << " step " << step;
      if (step > 0) {  // what a worker prefetched by after the step before (Note [Prefetch across iterations])
        const auto& before = got[static_cast<std::size_t>(r)][static_cast<std::size_t>(step - 1)].table;
        EXPECT_EQ(schedule::nextTable(plan, 3, before, true, schedule::DispatchRule::kRoundRobin), d.table)
            << "rank " << r << " step " << step;
      }
      EXPECT_EQ(d.planChanged, step == 0);
      EXPECT_EQ(d.stop, step == 3) << "rank " << r << " step " << step;
    }
  }
}

// A preemption signal that reaches a rank other than 0 (SIGTERM to one process) stops every rank at the same
// step: the rank tells rank 0, whose next directive says stop. Rank 0 may have sent up to two directives
// beyond the requesting rank's step (it waits for step t-2's reports before step t's directive), so the stop
// requested at step 1 lands at step 1, 2 or 3 (3 in about 3% of runs here).
TEST(Coordinator, AStopRequestedByAnotherRankReachesAllAtOneStep) {
  const LayerCosts proxy = uniformLayerCosts(6, 3.0);
  const Plan plan = schedule::partition(proxy, {3, 1.1, 0}).plan;
  std::vector<int> stoppedAt(3, -1);
  onThreadsAsRanks(3, [&](control::ControlChannel& channel) {
    Coordination coordination(channel, {3, 1, true, 0, 0, {10.0, 10.0}}, plan, proxy);
    int step = 0;
    for (; step < 6; ++step) {
      if (step == 1 && channel.rank() == 2) coordination.requestStop(SIGTERM);
      if (coordination.begin(step).stop) {
        // Rank 0 names the signal and the rank it reached (issue 38: it said "signal 0").
        if (channel.rank() == 0) {
          EXPECT_EQ(coordination.stopCause(), std::make_pair(SIGTERM, 2));
        }
        break;
      }
      coordination.report(step, std::vector<double>(8, 1.0), std::vector<double>(8, 2.0));
    }
    stoppedAt[static_cast<std::size_t>(channel.rank())] = step;
    coordination.finish(step);
  });
  EXPECT_TRUE(stoppedAt[0] >= 1 && stoppedAt[0] <= 3) << stoppedAt[0];
  EXPECT_EQ(stoppedAt[1], stoppedAt[0]);
  EXPECT_EQ(stoppedAt[2], stoppedAt[0]);
}

TEST(Coordinator, BoundSchedulesGetTheSameTableEveryIteration) {
  const LayerCosts proxy = uniformLayerCosts(6, 3.0);
  const Plan plan = schedule::balancedBoundPlan(proxy, 2);
  onThreadsAsRanks(2, [&](control::ControlChannel& channel) {
    Coordination coordination(channel, {2, 1, false, 0, 0, {10.0, 10.0}}, plan, proxy);
    std::optional<schedule::DispatchTable> guessed;  // Note [Prefetch across iterations]
    for (int step = 0; step < 3; ++step) {
      const schedule::DispatchTable table = coordination.begin(step).table;
      EXPECT_EQ(table, schedule::dispatchBound(plan, 2));
      if (guessed) {
        EXPECT_EQ(*guessed, table) << "step " << step;
      }
      guessed = schedule::nextTable(plan, 2, table, false, schedule::DispatchRule::kRoundRobin);
    }
  });
}

// Rank `rank` of 2 reports `layers` layers' times of `step` with a head of six decoder layers of work: each
// layer is measured by one rank (rank l % 2); the other reports "not measured".
void reportHeavyHead(Coordination& coordination, int rank, std::int64_t step, int layers) {
  std::vector<double> fwd(static_cast<std::size_t>(layers), -1.0), bwd(fwd);
  for (int l = rank; l < layers; l += 2) {
    fwd[static_cast<std::size_t>(l)] = l == layers - 1 ? 6.0 : (l == 0 ? 0.05 : 1.0);
    bwd[static_cast<std::size_t>(l)] = 2 * fwd[static_cast<std::size_t>(l)];
  }
  coordination.report(step, fwd, bwd);
}

// Reports say the head is six decoder layers of work (the proxy said one): rank 0 re-partitions and every
// rank receives the new plan, flagged as changed, from the first re-planning step on.
TEST(Coordinator, ReplansFromReportedTimesAndEveryRankGetsTheNewPlan) {
  const LayerCosts proxy = uniformLayerCosts(6, 1.0);
  const int L = 8;
  const Plan initial = schedule::partition(proxy, {2, 1.1, 0}).plan;
  std::vector<std::vector<Directive>> got(2);
  onThreadsAsRanks(2, [&](control::ControlChannel& channel) {
    Coordination coordination(channel, {2, 1, true, 2, 0, {10.0, 10.0}}, initial, proxy);
    for (int step = 0; step < 6; ++step) {
      got[static_cast<std::size_t>(channel.rank())].push_back(coordination.begin(step));
      reportHeavyHead(coordination, channel.rank(), step, L);
    }
  });
  // Steps 2 and 3 fold in iterations 0 (dropped as warm-up) and 1; step 4 is the first re-planning step.
  for (int r = 0; r < 2; ++r) {
    const auto& d = got[static_cast<std::size_t>(r)];
    for (int step = 1; step < 4; ++step) EXPECT_EQ(d[static_cast<std::size_t>(step)].plan, initial);
    EXPECT_TRUE(d[4].planChanged);
    EXPECT_FALSE(d[5].planChanged);
    EXPECT_EQ(d[4].plan, d[5].plan);
    EXPECT_EQ(d[4].plan.fused, (schedule::Range{L - 1, L})) << schedule::describe(d[4].plan);
    EXPECT_EQ(d[4].plan, got[0][4].plan);
  }
  // The new plan is better than the initial one on the reported times (the proxy's bytes are unchanged).
  LayerCosts measured = uniformLayerCosts(6, 6.0);
  const Plan& replanned = got[0][4].plan;
  EXPECT_NE(replanned, initial);
  EXPECT_LT(schedule::planObjective(replanned, measured, 2), 0.97 * schedule::planObjective(initial, measured, 2))
      << schedule::describe(initial) << " -> " << schedule::describe(replanned);
}

// The plan search re-plans in the background (Note [Background re-plan]): rank 0 starts the search for
// re-planning step 4 at step 3 (the first with a profile: iteration 0 is dropped as warm-up) and adopts its
// plan at step 4, as the reference partitioner would; every rank gets the plan, flagged once, and it is faster
// than the initial one in simulation on the reported times.
TEST(Coordinator, TheSearchReplansInTheBackgroundAndEveryRankGetsItsPlan) {
  const LayerCosts proxy = uniformLayerCosts(6, 1.0);
  const int L = 8, steps = 8;
  const schedule::PlanTarget target{2, 2, 0.0, 1};
  const Plan initial = schedule::choosePlan(schedule::PlannerKind::kSearch, proxy, target);
  std::vector<std::vector<Directive>> got(2);
  onThreadsAsRanks(2, [&](control::ControlChannel& channel) {
    CoordinationOptions options{2, 1, true, 2, 0, {10.0, 10.0}};
    options.planner = schedule::PlannerKind::kSearch;
    options.microbatches = target.microbatches;
    options.recomputeAhead = target.recomputeAhead;
    Coordination coordination(channel, options, initial, proxy);
    for (int step = 0; step < steps; ++step) {
      got[static_cast<std::size_t>(channel.rank())].push_back(coordination.begin(step));
      reportHeavyHead(coordination, channel.rank(), step, L);
    }
  });
  int changedAt = -1;
  for (int step = 1; step < steps; ++step) {
    const Directive& d = got[0][static_cast<std::size_t>(step)];
    EXPECT_EQ(d.plan, got[1][static_cast<std::size_t>(step)].plan) << "step " << step;
    if (d.planChanged) {
      EXPECT_EQ(changedAt, -1) << "changed again at step " << step;
      changedAt = step;
    }
  }
  ASSERT_EQ(changedAt, 4);
  const Plan& replanned = got[0][static_cast<std::size_t>(changedAt)].plan;
  LayerCosts measured = uniformLayerCosts(6, 6.0);
  EXPECT_LT(schedule::simulatedStep(measured, replanned, target),
            0.97 * schedule::simulatedStep(measured, initial, target))
      << schedule::describe(initial) << " -> " << schedule::describe(replanned);
  EXPECT_EQ(got[0].back().plan, replanned);
}

// Earliest-finish dispatch: rank 2 reports every layer it ran three times as slow as the others do. Rank 0
// measures it (against the pooled profile) at about a third of the fastest worker's speed and, from then on,
// sends it fewer jobs than round-robin would; every rank runs rank 0's table.
TEST(Coordinator, EarliestFinishMeasuresASlowRankAndSendsItFewerJobs) {
  const LayerCosts proxy = uniformLayerCosts(6, 3.0);
  const int L = 8, steps = 16;
  const Plan plan = schedule::partition(proxy, {3, 1.1, 0}).plan;
  std::vector<std::vector<Directive>> got(3);
  std::vector<double> speeds;
  onThreadsAsRanks(3, [&](control::ControlChannel& channel) {
    CoordinationOptions options{3, 1, true, 0, 0, {10.0, 10.0}};
    options.dispatch = schedule::DispatchRule::kEarliestFinish;
    options.microbatches = 4;
    Coordination coordination(channel, options, plan, proxy);
    const double pace = channel.rank() == 2 ? 3.0 : 1.0;
    for (int step = 0; step < steps; ++step) {
      const Directive d = coordination.begin(step);
      got[static_cast<std::size_t>(channel.rank())].push_back(d);
      std::vector<double> fwd(L, -1.0), bwd(L, -1.0);
      for (const schedule::Job& job : d.table.jobs) {
        if (job.worker != channel.rank()) continue;
        for (int l = job.layers.begin; l < job.layers.end; ++l) {
          const double base = l == L - 1 ? 3.0 : 1.0;  // the head: three layers of work
          if (job.kind == schedule::JobKind::kForward) fwd[static_cast<std::size_t>(l)] = pace * base;
          if (job.kind != schedule::JobKind::kForward) bwd[static_cast<std::size_t>(l)] = pace * 3 * base;
        }
      }
      coordination.report(step, fwd, bwd);
    }
    if (channel.rank() == 0) speeds = coordination.workerSpeeds();
  });
  ASSERT_EQ(speeds.size(), 3u);
  EXPECT_NEAR(speeds[0], 1.0, 0.1);
  EXPECT_NEAR(speeds[1], 1.0, 0.1);
  EXPECT_NEAR(speeds[2], 1.0 / 3, 0.1);
  int slow = 0, slowRoundRobin = 0;
  for (int step = 0; step < steps; ++step) {
    const Directive& d = got[0][static_cast<std::size_t>(step)];
    for (int r = 1; r < 3; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)], d);
    if (step < steps / 2) continue;  // measured by then
    for (const auto& job : d.table.jobs) slow += job.worker == 2 ? 1 : 0;
    const auto start = d.table.counterEnd - static_cast<std::int64_t>(d.table.jobs.size());
    for (const auto& job : schedule::dispatch(plan, 3, start).jobs) slowRoundRobin += job.worker == 2 ? 1 : 0;
  }
  EXPECT_LT(slow, slowRoundRobin) << slow << " jobs on the slow rank; round-robin: " << slowRoundRobin;
  // Its next table depends on times measured meanwhile: nothing to prefetch by (Note [Prefetch across iterations]).
  EXPECT_FALSE(schedule::nextTable(plan, 3, got[0].back().table, true, schedule::DispatchRule::kEarliestFinish));
}

TEST(Coordinator, NodesAverageTheirTimings) {
  const LayerCosts proxy = uniformLayerCosts(2, 1.0);
  const int L = 4;
  double forward0 = 0;
  onThreadsAsRanks(4, [&](control::ControlChannel& channel) {
    Coordination coordination(channel, {2, 2, true, 100, 0, {10.0, 10.0}}, schedule::partition(proxy, {2, 1.1, 0}).plan,
                              proxy);
    const int node = channel.rank() / 2;
    for (int step = 0; step < 4; ++step) {
      coordination.begin(step);
      // Node 0's local rank 0 measures 1 ms for layer 0, node 1's 3 ms; local rank 1 measures nothing there.
      std::vector<double> fwd(L, channel.rank() % 2 == 0 ? 1.0 + 2.0 * node : -1.0), bwd(L, -1.0);
      coordination.report(step, fwd, bwd);
    }
    if (channel.rank() == 0) forward0 = coordination.profile().forward(0);
  });
  EXPECT_NEAR(forward0, 2.0, 1e-12);  // iteration 0 dropped; one EMA sample, bias-corrected, is exact
}

TEST(Coordinator, ALateReportNamesTheRank) {
  const LayerCosts proxy = uniformLayerCosts(2, 1.0);
  const Plan plan = schedule::partition(proxy, {2, 1.1, 0}).plan;
  std::string error;
  control::InProcHub hub(2);
  std::thread follower([&] {
    control::InProcChannel channel(hub, 1);
    Coordination coordination(channel, {2, 1, true, 2, 0, {0.2, 0.2}}, plan, proxy);
    coordination.begin(0);
    coordination.begin(1);  // and never reports
  });
  control::InProcChannel channel(hub, 0);
  Coordination coordination(channel, {2, 1, true, 2, 0, {0.2, 0.2}}, plan, proxy);
  std::vector<double> times(4, 1.0);
  for (int step = 0; step < 2; ++step) {
    coordination.begin(step);
    coordination.report(step, times, times);
  }
  try {
    coordination.begin(2, [](int r) { return "rank " + std::to_string(r) + ": worker: bwd 0-1 mb 3 (step 2)"; });
  } catch (const control::PeerError& e) {
    error = e.what();
  }
  follower.join();
  EXPECT_NE(error.find("stalled: waited 0 s for rank 1's layer timings of step 1"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1: worker: bwd 0-1 mb 3 (step 2)"), std::string::npos) << error;
}

TEST(Coordinator, AMissingDirectiveIsAStallNamingRankZero) {
  const LayerCosts proxy = uniformLayerCosts(2, 1.0);
  control::InProcHub hub(2);
  control::InProcChannel channel(hub, 1);
  Coordination coordination(channel, {2, 1, true, 0, 0, {0.1, 0.1}}, schedule::partition(proxy, {2, 1.1, 0}).plan,
                            proxy);
  try {
    coordination.begin(0);
    FAIL() << "expected PeerError";
  } catch (const control::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("for rank 0's plan and dispatch table of step 1"), std::string::npos)
        << e.what();
  }
}

TEST(Directive, RoundTripsAndRejectsSkewAndCorruption) {
  const LayerCosts proxy = uniformLayerCosts(6, 3.0);
  Directive d;
  d.step = 7;
  d.planChanged = true;
  d.stop = true;
  d.plan = schedule::partition(proxy, {3, 1.1, 0}).plan;
  d.table = schedule::dispatch(d.plan, 3, 11);
  const auto words = encode(d);
  EXPECT_EQ(decode(words, 8, 3, 0), d);

  auto errorOf = [](const std::vector<std::int64_t>& w, int workers) {
    try {
      decode(w, 8, workers, 0);
    } catch (const control::PeerError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto skewed = words;
  skewed[0] = 99;
  EXPECT_NE(errorOf(skewed, 3).find("has version 99, this binary speaks version 2"), std::string::npos);
  auto truncated = words;
  truncated.pop_back();
  EXPECT_NE(errorOf(truncated, 3).find("directive from rank 0 is truncated"), std::string::npos);
  EXPECT_NE(errorOf(words, 2).find("job worker = 2 is outside [0, 1]"), std::string::npos) << errorOf(words, 2);
  auto longer = words;
  longer.push_back(0);
  EXPECT_NE(errorOf(longer, 3).find("1 words after its end"), std::string::npos);
}

}  // namespace
}  // namespace rp::coordinator
