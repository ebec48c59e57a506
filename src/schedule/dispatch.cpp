#include "schedule/dispatch.h"

#include <algorithm>

#include "common/error.h"

namespace rp::schedule {

const char* jobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kForward:
      return "fwd";
    case JobKind::kFused:
      return "fused";
    case JobKind::kBackward:
      return "bwd";
  }
  return "?";
}

const char* dispatchRuleName(DispatchRule rule) {
  return rule == DispatchRule::kRoundRobin ? "round_robin" : "earliest_finish";
}

DispatchRule parseDispatchRule(const std::string& name, const std::string& what) {
  if (name == "round_robin") return DispatchRule::kRoundRobin;
  if (name == "earliest_finish") return DispatchRule::kEarliestFinish;
  RP_THROW(InputError, "{} = \"{}\": expected \"round_robin\" or \"earliest_finish\"", what, name);
}

DispatchTable dispatch(const Plan& plan, int workers, std::int64_t counterStart) {
  RP_CHECK(workers >= 1, "dispatch needs at least one worker, got {}", workers);
  DispatchTable table;
  std::int64_t k = counterStart;
  auto add = [&](JobKind kind, int stage, Range layers) {
    table.jobs.push_back({kind, stage, layers, static_cast<int>(k % workers)});
    ++k;
  };
  for (std::size_t s = 0; s < plan.forward.size(); ++s) add(JobKind::kForward, static_cast<int>(s), plan.forward[s]);
  add(JobKind::kFused, 0, plan.fused);
  for (std::size_t s = 0; s < plan.backward.size(); ++s) add(JobKind::kBackward, static_cast<int>(s), plan.backward[s]);
  table.counterEnd = k;
  return table;
}

std::optional<DispatchTable> nextTable(const Plan& plan, int workers, const DispatchTable& table, bool roundRobin,
                                       DispatchRule rule) {
  if (!roundRobin) return table;
  if (rule != DispatchRule::kRoundRobin) return std::nullopt;
  return dispatch(plan, workers, table.counterEnd);
}

DispatchTable dispatchBound(const Plan& plan, int workers) {
  const int stages = static_cast<int>(plan.forward.size()) + 1;
  if (stages != workers || plan.backward.size() != plan.forward.size()) {
    RP_THROW(InputError, "a schedule with weights bound to workers needs one stage per worker: {} workers, plan {}",
             workers, describe(plan));
  }
  DispatchTable table;
  for (int s = 0; s < stages - 1; ++s)
    table.jobs.push_back({JobKind::kForward, s, plan.forward[static_cast<std::size_t>(s)], s});
  table.jobs.push_back({JobKind::kFused, 0, plan.fused, workers - 1});
  for (int b = 0; b < stages - 1; ++b) {
    table.jobs.push_back({JobKind::kBackward, b, plan.backward[static_cast<std::size_t>(b)], workers - 2 - b});
  }
  return table;
}

std::vector<MicrobatchOp> oneFOneBOrder(const DispatchTable& table, int worker, int microbatches) {
  std::int64_t forward = -1, backward = -1, fused = -1;
  for (std::size_t k = 0; k < table.jobs.size(); ++k) {
    const Job& job = table.jobs[k];
    if (job.worker != worker) continue;
    if (job.kind == JobKind::kForward) forward = static_cast<std::int64_t>(k);
    if (job.kind == JobKind::kBackward) backward = static_cast<std::int64_t>(k);
    if (job.kind == JobKind::kFused) fused = static_cast<std::int64_t>(k);
  }
  std::vector<MicrobatchOp> ops;
  if (fused >= 0) {
    for (int m = 0; m < microbatches; ++m) ops.push_back({fused, m});
    return ops;
  }
  if (forward < 0) return ops;
  const int workers = static_cast<int>(table.jobs.size() + 1) / 2;
  const int warmup = std::min(workers - 1 - worker, microbatches);
  for (int m = 0; m < warmup; ++m) ops.push_back({forward, m});
  for (int i = 0; i < microbatches - warmup; ++i) {
    ops.push_back({forward, warmup + i});
    ops.push_back({backward, i});
  }
  for (int m = microbatches - warmup; m < microbatches; ++m) ops.push_back({backward, m});
  return ops;
}

}  // namespace rp::schedule
