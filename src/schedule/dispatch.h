// Round-robin dispatch (docs/schedule.md): the jobs of one iteration are the forward stages, the fused
// stage, then the backward stages (deepest first); job k goes to worker (c0 + k) mod N, and the counter
// continues across iterations. One job is one stage over all M microbatches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/plan.h"

namespace rp::schedule {

enum class JobKind { kForward, kFused, kBackward };
// pipeline.dispatch: which worker runs each job of a RoundPipe iteration — round-robin, or the worker predicted
// to finish it first (schedule/earliest_finish.h).
enum class DispatchRule { kRoundRobin, kEarliestFinish };
const char* dispatchRuleName(DispatchRule rule);                                   // "round_robin", "earliest_finish"
DispatchRule parseDispatchRule(const std::string& name, const std::string& what);  // InputError naming `what`
const char* jobKindName(JobKind kind);

struct Job {
  JobKind kind;
  int stage;  // index within its kind's list (plan.forward / plan.backward); 0 for the fused stage
  Range layers;
  int worker;
  bool operator==(const Job&) const = default;
};

struct DispatchTable {
  std::vector<Job> jobs;        // in dispatch order
  std::int64_t counterEnd = 0;  // c0 + number of jobs: the next iteration's c0
  bool operator==(const DispatchTable&) const = default;
};

DispatchTable dispatch(const Plan& plan, int workers, std::int64_t counterStart);

// The table of the iteration after `table` as long as `plan` stays: round-robin continues from its counter, a
// bound table (`roundRobin` false) repeats; under earliest_finish it depends on times measured meanwhile
// (nullopt). What a worker prefetches its next iteration's first job by (Note [Prefetch across iterations]).
std::optional<DispatchTable> nextTable(const Plan& plan, int workers, const DispatchTable& table, bool roundRobin,
                                       DispatchRule rule);

// The baselines' assignment (weights bound to workers): the plan has one stage per worker — forward stage s
// and the backward stage over the same layers on worker s, the fused (last) stage on worker N-1.
DispatchTable dispatchBound(const Plan& plan, int workers);

// 1F1B (PipeDream-flush) order of one worker's microbatch operations in a bound table: warm-up forwards
// (N-1-w of them), then one forward and one backward alternately, then the remaining backwards; the last
// worker runs its fused stage microbatch by microbatch.
struct MicrobatchOp {
  std::int64_t job;  // index into table.jobs
  int microbatch;
};
std::vector<MicrobatchOp> oneFOneBOrder(const DispatchTable& table, int worker, int microbatches);

}  // namespace rp::schedule
