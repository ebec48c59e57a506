#include "schedule/plan_search.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "schedule/sim.h"

namespace rp::schedule {
namespace {

// The split of [0, e) into k contiguous stages minimising the slowest stage (dynamic programming), ascending.
std::vector<Range> bestSplit(const std::vector<double>& cost, int e, int k) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(static_cast<std::size_t>(e) + 1, 0.0);
  for (int l = 0; l < e; ++l)
    prefix[static_cast<std::size_t>(l) + 1] = prefix[static_cast<std::size_t>(l)] + cost[static_cast<std::size_t>(l)];
  // best[j][i]: the slowest stage when [0, i) is split into j stages; cut[j][i]: where the last one starts.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(k) + 1,
                                        std::vector<double>(static_cast<std::size_t>(e) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(e) + 1, 0));
  best[0][0] = 0.0;
  for (int j = 1; j <= k; ++j) {
    for (int i = j; i <= e; ++i) {
      for (int s = j - 1; s < i; ++s) {
        const double v = std::max(best[static_cast<std::size_t>(j) - 1][static_cast<std::size_t>(s)],
                                  prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(s)]);
        if (v < best[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)]) {
          best[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)] = v;
          cut[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)] = s;
        }
      }
    }
  }
  std::vector<Range> out;
  for (int j = k, i = e; j > 0; --j) {
    const int s = cut[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)];
    out.push_back({s, i});
    i = s;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

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

double simulatedStep(const LayerCosts& c, const Plan& plan, int workers, int microbatches) {
  SimSetup setup;
  setup.schedule = SimSchedule::kRoundPipe;
  setup.workers = workers;
  setup.microbatches = microbatches;
  setup.rounds = 2;  // a second round shows how jobs of consecutive iterations interleave
  setup.plan = plan;
  return simulate(setup, simCosts(c)).makespan / 2.0;
}

SearchResult searchPlan(const LayerCosts& c, int workers, int microbatches, double memoryLimit) {
  const int L = static_cast<int>(c.forward.size());
  auto makespan = [&](const Plan& p) { return simulatedStep(c, p, workers, microbatches); };
  const PartitionOptions options{workers, 1.1, memoryLimit};
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
  for (int e = 1; e < L; ++e) {  // the fused tail [e, L) holds the head and maybe decoder layers
    Plan p;
    p.fused = {e, L};
    if (!fits({p.fused}, c.backwardBytes, cap)) continue;
    for (int f = 1; f <= std::min(e, 2 * workers); ++f) {
      p.forward = bestSplit(c.forward, e, f);
      if (!fits(p.forward, c.bytes, cap)) continue;
      for (int b = 1; b <= std::min(e, 3 * workers); ++b) {
        std::vector<Range> backward = bestSplit(c.backward, e, b);
        if (!fits(backward, c.backwardBytes, cap)) continue;
        std::reverse(backward.begin(), backward.end());  // deepest first
        p.backward = backward;
        consider(p);
      }
    }
  }
  return r;
}

}  // namespace rp::schedule
