// The coordinator (docs/protocol.md, "Coordinator"): world rank 0 decides each iteration's plan and dispatch
// table and sends them to every rank; every rank reports its measured per-layer times back, and rank 0 folds
// them into the profile it re-partitions from. Torch-free; unit-tested with the in-process channel.
// Thread-safety: one Coordination per rank, used by that rank's main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/channel.h"
#include "coordinator/directive.h"
#include "coordinator/profile.h"
#include "schedule/earliest_finish.h"
#include "schedule/partitioner.h"
#include "schedule/plan_search.h"

namespace rp::coordinator {

struct CoordinationOptions {
  int workers = 1;               // pipeline workers per node (dispatch targets)
  int nodes = 1;                 // data-parallel replicas of the pipeline (their timings are averaged)
  bool roundRobin = true;        // RoundPipe dispatch; false = weights bound to workers (gpipe, 1f1b)
  std::int64_t replanEvery = 0;  // re-partition from measured times every N iterations; 0 = never
  double memoryLimitBytes = 0;   // per worker, for the partitioner
  control::StallPolicy stall;    // for directives and timing reports
  schedule::PlannerKind planner = schedule::PlannerKind::kReference;      // how re-plans are chosen
  int microbatches = 1;                                                   // per iteration, for the search
  int recomputeAhead = 0;                                                 // pipeline.recompute_ahead, for the planner
  schedule::DispatchRule dispatch = schedule::DispatchRule::kRoundRobin;  // pipeline.dispatch (RoundPipe)
  std::vector<int> workerOfRank{};  // each world rank's worker index in its node; empty = rank mod workers
};

class Coordination {
 public:
  // `channel` spans every rank of the job (rank 0 coordinates). `plan` and `proxy` (the costs before any
  // measurement) are used on rank 0 only: other ranks receive their plan in each directive.
  Coordination(control::ControlChannel& channel, CoordinationOptions options, schedule::Plan plan,
               schedule::LayerCosts proxy);

  // Iteration `step`'s directive: decided on rank 0 and sent to every other rank, received on the others.
  // `describeRank` (optional) says what a late rank was last doing, for the stall message. `meanwhile`
  // (optional) runs as the wait starts and every millisecond of it, until it returns false (Note [Prefetch while
  // waiting for the directive]).
  Directive begin(std::int64_t step, const std::function<std::string(int)>& describeRank = {},
                  const std::function<bool()>& meanwhile = {});
  // This rank's per-layer forward and backward milliseconds per microbatch in iteration `step` (negative =
  // not measured by this rank). A no-op for the baselines (weights bound: nothing to re-plan).
  void report(std::int64_t step, const std::vector<double>& forwardMs, const std::vector<double>& backwardMs);

  // This rank received a preemption signal: rank 0's next directive tells every rank to stop before running
  // its iteration. Another rank tells rank 0 (once, kStopRequest); rank 0 looks for such requests, without
  // waiting, before each directive.
  void requestStop(int signal);
  // Rank 0, once a directive said stop: the signal and the rank that received it first.
  std::pair<int, int> stopCause() const { return {stopSignal_, stopRank_}; }

  // Clean shutdown after iterations [0, steps): rank 0 takes every report still in flight, so no message of
  // this run is left for the next user of the channel.
  void finish(std::int64_t steps, const std::function<std::string(int)>& describeRank = {});

  const LayerProfile& profile() const { return profile_; }
  // Rank 0, earliest-finish dispatch: each worker's measured speed relative to the fastest (the slowest node's
  // where several run the same worker index); all 1 before any measurement.
  std::vector<double> workerSpeeds() const;
  // Rank 0, earliest-finish dispatch: what the rule knows at the next directive (the profile's times before the
  // speeds are measured).
  schedule::DispatchCosts dispatchCosts() const;
  // The round-robin counter: where the next iteration's dispatch starts (saved in checkpoints, so a resumed
  // run assigns jobs to the same workers).
  std::int64_t counter() const { return counter_; }
  // A run resumed after `steps` iterations, with the saved counter: no reports of earlier steps will come.
  void resumeAt(std::int64_t counter, std::int64_t steps) {
    counter_ = counter;
    collected_ = steps;
  }

 private:
  // RoundPipe runs always measure (the profile is also written for the simulator); re-planning is optional.
  bool collecting() const { return options_.roundRobin; }
  // Rank 0: every rank's report of `step`, summed per layer (each layer is run by one worker per node) and
  // averaged over nodes, into the profile.
  void collect(std::int64_t step, const std::function<std::string(int)>& describeRank);
  // Rank 0, every pipeline.replan_every steps: a candidate plan from the measured profile — the plan search's
  // started at the step before (Note [Background re-plan]) — adopted or not.
  void replan(std::int64_t step);
  // Rank 0: the plan search for the next re-planning step, on a thread of its own.
  void startSearch();
  schedule::PlanTarget planTarget() const {
    return {options_.workers, options_.microbatches, options_.memoryLimitBytes, options_.recomputeAhead};
  }
  // Switches to `candidate` for a predicted gain of 3% or more on `measured`.
  void adopt(const schedule::Plan& candidate, const schedule::LayerCosts& measured, std::int64_t step);
  int workerOf(int rank) const;
  std::vector<double> workerSpeeds(const SpeedModel::Fit& fit) const;
  void logSpeeds(std::int64_t step, const std::vector<double>& speeds, const schedule::DispatchTable& table);
  Directive decide(std::int64_t step);
  bool stopRequested();

  control::ControlChannel& channel_;
  CoordinationOptions options_;
  schedule::Plan plan_;
  schedule::LayerCosts proxy_;
  int layers_;
  LayerProfile profile_;
  SpeedModel speeds_;                                // rank 0: earliest-finish dispatch's worker speeds
  std::int64_t speedReports_ = 0;                    // rank 0: iterations offered to speeds_ (the first is dropped)
  schedule::WorkerClocks clocks_;                    // rank 0: earliest-finish dispatch's predicted free times
  std::vector<double> loggedSpeeds_;                 // rank 0: the speeds last logged
  std::int64_t counter_ = 0;                         // round-robin dispatch counter, continued across iterations
  std::int64_t collected_ = 0;                       // rank 0: iterations whose reports are folded into the profile
  bool changed_ = true;                              // the next directive carries a new plan
  bool stop_ = false;                                // rank 0: the next directive says stop; else: rank 0 was told
  int stopSignal_ = 0, stopRank_ = 0;                // rank 0: what stopped the job, and where it arrived first
  std::map<std::int64_t, std::vector<double>> own_;  // rank 0's reports not yet collected
  struct PendingPlan {
    std::future<schedule::Plan> plan;
    schedule::LayerCosts measured;  // the costs it was searched on
  };
  std::optional<PendingPlan> searching_;  // rank 0: a plan search running in the background
};

}  // namespace rp::coordinator
