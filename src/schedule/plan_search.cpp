#include "schedule/plan_search.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "schedule/sim.h"

namespace rp::schedule {
namespace {

bool fits(const std::vector<Range>& stages, const std::vector<double>& bytes, double cap) {
  for (const Range& r : stages) {
    double b = 0;
    for (int l = r.begin; l < r.end; ++l) b += bytes[static_cast<std::size_t>(l)];
    if (b > cap) return false;
  }
  return true;
}

SimCosts simCosts(const LayerCosts& c) {
  SimCosts sim;
  sim.forward = c.forward;
  for (std::size_t l = 0; l < c.forward.size(); ++l)
    sim.backward.push_back(std::max(0.0, c.backward[l] - c.forward[l]));
  return sim;
}

}  // namespace

double simulatedStep(const LayerCosts& c, const Plan& plan, const PlanTarget& target) {
  SimSetup setup;
  setup.schedule = SimSchedule::kRoundPipe;
  setup.workers = target.workers;
  setup.microbatches = target.microbatches;
  setup.rounds = 2;  // a second round shows how jobs of consecutive iterations interleave
  setup.plan = plan;
  setup.recomputeAhead = target.recomputeAhead;
  return simulate(setup, simCosts(c)).makespan / 2.0;
}

namespace {
PartitionOptions partitionOptions(const PlanTarget& target) {
  return {.minStages = target.workers, .memoryLimit = target.memoryLimit};
}
}  // namespace

SearchResult searchPlan(const LayerCosts& c, const PlanTarget& target) {
  const int L = static_cast<int>(c.forward.size());
  const int workers = target.workers;
  const double memoryLimit = target.memoryLimit;
  auto makespan = [&](const Plan& p) { return simulatedStep(c, p, target); };
  const PartitionOptions options = partitionOptions(target);
  SearchResult r;
  r.reference = partition(c, options).plan;
  r.referenceMakespan = makespan(r.reference);
  r.plan = r.reference;
  r.makespan = r.referenceMakespan;
  r.candidates = 1;
  auto consider = [&](const Plan& p) {
    const double m = makespan(p);
    ++r.candidates;
    if (m < r.makespan - 1e-12 || (m <= r.makespan + 1e-12 && p.stageCount() < r.plan.stageCount())) {
      r.plan = p;
      r.makespan = m;
    }
  };
  for (const auto& candidate : partitionCandidates(c, options)) consider(candidate.plan);
  const double cap = memoryLimit > 0 ? memoryLimit / 2.0 : std::numeric_limits<double>::infinity();
  // Note [One stage for one worker]: one worker runs every job in turn, so the whole model as one fused stage
  // computes what the split plans compute, without the recompute a backward stage makes or a second upload of
  // the embedding, and one job an iteration lets the next iteration's weights come in while this one computes
  // (Note [Prefetch across iterations]). With more workers a single stage leaves all but one idle in an
  // iteration, which the simulator's overlapping rounds do not see, so it is not a candidate there.
  if (workers == 1) {
    Plan whole;
    whole.fused = {0, L};
    if (fits({whole.fused}, c.backwardBytes, cap)) consider(whole);
  }
  for (int e = 1; e < L; ++e) {  // the fused tail [e, L) holds the head and maybe decoder layers
    Plan p;
    p.fused = {e, L};
    if (!fits({p.fused}, c.backwardBytes, cap)) continue;
    for (int f = 1; f <= std::min(e, 2 * workers); ++f) {
      p.forward = minMaxSplit(c.forward, e, f);
      if (!fits(p.forward, c.bytes, cap)) continue;
      for (int b = 1; b <= std::min(e, 3 * workers); ++b) {
        std::vector<Range> backward = minMaxSplit(c.backward, e, b);
        if (!fits(backward, c.backwardBytes, cap)) continue;
        std::reverse(backward.begin(), backward.end());  // deepest first
        p.backward = backward;
        consider(p);
      }
    }
  }
  return r;
}

PlannerKind parsePlannerKind(const std::string& name, const std::string& what) {
  if (name == "reference") return PlannerKind::kReference;
  if (name == "search") return PlannerKind::kSearch;
  RP_THROW(InputError, "{} = \"{}\": expected \"reference\" or \"search\"", what, name);
}

Plan choosePlan(PlannerKind planner, const LayerCosts& costs, const PlanTarget& target) {
  if (planner == PlannerKind::kSearch) return searchPlan(costs, target).plan;
  return partition(costs, partitionOptions(target)).plan;
}

}  // namespace rp::schedule
