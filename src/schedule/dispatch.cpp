#include "schedule/dispatch.h"

#include "common/error.h"

namespace rp::schedule {

const char* jobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kForward: return "fwd";
    case JobKind::kFused: return "fused";
    case JobKind::kBackward: return "bwd";
  }
  return "?";
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

}  // namespace rp::schedule
