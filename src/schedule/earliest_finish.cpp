#include "schedule/earliest_finish.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace rp::schedule {

namespace {

// A job's milliseconds per microbatch at speed 1: a forward job its layers' forward, a fused or backward job
// their backward (which includes the forward or recompute).
double jobMsPerMicrobatch(const Job& job, const std::vector<double>& forward, const std::vector<double>& backward) {
  double ms = 0;
  const auto& perLayer = job.kind == JobKind::kForward ? forward : backward;
  for (int l = job.layers.begin; l < job.layers.end; ++l) ms += perLayer[static_cast<std::size_t>(l)];
  return ms;
}

}  // namespace

DispatchTable dispatchEarliestFinish(const Plan& plan, const DispatchCosts& costs, std::int64_t counterStart,
                                     WorkerClocks& clocks) {
  const int workers = static_cast<int>(costs.speed.size());
  RP_CHECK(workers >= 1, "earliest-finish dispatch needs at least one worker");
  if (costs.forward.size() != static_cast<std::size_t>(plan.layerCount()) ||
      costs.backward.size() != costs.forward.size()) {
    RP_THROW(InputError, "earliest-finish dispatch: costs for {}/{} layers, the plan has {}", costs.forward.size(),
             costs.backward.size(), plan.layerCount());
  }
  for (int w = 0; w < workers; ++w) {
    const double s = costs.speed[static_cast<std::size_t>(w)];
    if (!(s > 0) || !std::isfinite(s)) RP_THROW(InputError, "earliest-finish dispatch: worker {} has speed {}", w, s);
  }
  if (costs.directiveWorker >= workers) {
    RP_THROW(InputError, "earliest-finish dispatch: directive worker {} of {}", costs.directiveWorker, workers);
  }
  if (clocks.freeAt.size() != static_cast<std::size_t>(workers)) {
    clocks.freeAt.assign(static_cast<std::size_t>(workers), 0.0);
  }
  // Time restarts at the first free worker, so the clocks stay small over a long run.
  const double origin = *std::min_element(clocks.freeAt.begin(), clocks.freeAt.end());
  for (double& t : clocks.freeAt) t -= origin;

  DispatchTable table = dispatch(plan, workers, counterStart);  // the jobs, and round-robin's choices as ties
  const auto M = static_cast<double>(std::max(1, costs.microbatches));
  const double directive =
      costs.directiveWorker >= 0 ? clocks.freeAt[static_cast<std::size_t>(costs.directiveWorker)] : 0.0;
  double previousFirstDone = directive, previousFinish = directive;
  for (Job& job : table.jobs) {
    const double work = jobMsPerMicrobatch(job, costs.forward, costs.backward);
    int best = job.worker;
    double bestFinish = 0, bestFirstDone = 0;
    for (int i = 0; i < workers; ++i) {
      const int w = (job.worker + i) % workers;  // round-robin's pick first: it wins ties
      const double perMb = work / costs.speed[static_cast<std::size_t>(w)];
      const double start = std::max(clocks.freeAt[static_cast<std::size_t>(w)], previousFirstDone);
      const double finish = std::max(start + M * perMb, previousFinish + perMb);
      // A relative margin: equal predictions computed in a different order are still ties.
      if (i == 0 || finish < bestFinish * (1 - 1e-9)) best = w, bestFinish = finish, bestFirstDone = start + perMb;
    }
    job.worker = best;
    clocks.freeAt[static_cast<std::size_t>(best)] = bestFinish;
    previousFirstDone = bestFirstDone;
    previousFinish = bestFinish;
  }
  return table;
}

}  // namespace rp::schedule
