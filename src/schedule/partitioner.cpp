#include "schedule/partitioner.h"

#include <algorithm>
#include <limits>
#include <set>

#include "common/error.h"

namespace rp::schedule {
namespace {

// Greedy packing of [0, e) walking `descending` (e-1 -> 0) or ascending; a new stage starts when adding a
// layer would exceed T or the memory cap. Returns ranges in walking order.
std::vector<Range> pack(int e, const std::vector<double>& cost, const std::vector<double>& bytes, double limitT,
                        double cap, bool descending) {
  std::vector<Range> out;
  double t = 0.0, m = 0.0;
  Range current{-1, -1};
  for (int k = 0; k < e; ++k) {
    const int l = descending ? e - 1 - k : k;
    const double c = cost[static_cast<std::size_t>(l)], b = bytes[static_cast<std::size_t>(l)];
    if (current.begin >= 0 && (t + c > limitT || m + b > cap)) {
      out.push_back(current);
      current = {-1, -1};
    }
    if (current.begin < 0) {
      current = {l, l + 1};
      t = 0.0;
      m = 0.0;
    }
    current.begin = std::min(current.begin, l);
    current.end = std::max(current.end, l + 1);
    t += c;
    m += b;
  }
  if (current.begin >= 0) out.push_back(current);
  return out;
}

}  // namespace

std::vector<PartitionResult> partitionCandidates(const LayerCosts& c, const PartitionOptions& o) {
  const int L = static_cast<int>(c.forward.size());
  RP_CHECK(L >= 2 && c.backward.size() == c.forward.size() && c.bytes.size() == c.forward.size() &&
               c.backwardBytes.size() == c.forward.size(),
           "layer cost vectors must all have the {} layers", L);
  PartitionResult result;
  double cap = o.memoryLimit > 0 ? o.memoryLimit / 2.0 : std::numeric_limits<double>::infinity();
  const double largest = *std::max_element(c.backwardBytes.begin(), c.backwardBytes.end());
  if (largest > cap) {
    cap = largest;  // the reference raises the limit to 2x the largest layer
    result.memoryLimitRaised = true;
  }

  double W = 0.0;
  for (int l = 0; l < L; ++l)
    W = std::max({W, c.forward[static_cast<std::size_t>(l)], c.backward[static_cast<std::size_t>(l)]});
  std::set<double> candidates;
  for (const auto* cost : {&c.forward, &c.backward}) {
    for (int i = 0; i < L; ++i) {
      double sum = 0.0;
      for (int j = i; j < L; ++j) {
        sum += (*cost)[static_cast<std::size_t>(j)];
        if (sum > o.upperThreshold * W) break;
        if (sum >= W) candidates.insert(sum);
      }
    }
  }
  RP_CHECK(!candidates.empty(), "no candidate stage time (W = {})", W);

  std::vector<PartitionResult> out;
  for (const double T : candidates) {
    // Fused tail: grow from the head while its backward cost and memory fit.
    int e = L;
    double t = 0.0, m = 0.0;
    for (int l = L - 1; l >= 0; --l) {
      const double bt = c.backward[static_cast<std::size_t>(l)], bm = c.backwardBytes[static_cast<std::size_t>(l)];
      if (l < L - 1 && (t + bt > T || m + bm > cap)) break;
      t += bt;
      m += bm;
      e = l;
    }
    Plan plan;
    plan.fused = {e, L};
    plan.forward = pack(e, c.forward, c.bytes, T, cap, /*descending=*/true);
    std::reverse(plan.forward.begin(), plan.forward.end());
    plan.backward = pack(e, c.backward, c.backwardBytes, T, cap, /*descending=*/false);
    std::reverse(plan.backward.begin(), plan.backward.end());
    validate(plan, L, "partitioner");
    out.push_back({plan, T, std::max(plan.stageCount(), o.minStages) * T, result.memoryLimitRaised});
  }
  return out;
}

PartitionResult partition(const LayerCosts& c, const PartitionOptions& o) {
  PartitionResult best;
  best.objective = std::numeric_limits<double>::infinity();
  for (const auto& candidate : partitionCandidates(c, o)) {
    if (candidate.objective < best.objective) best = candidate;  // the smallest T on ties (candidates ascend)
  }
  return best;
}

double planObjective(const Plan& plan, const LayerCosts& c, int minStages) {
  auto sum = [](const Range& r, const std::vector<double>& v) {
    double t = 0.0;
    for (int l = r.begin; l < r.end; ++l) t += v[static_cast<std::size_t>(l)];
    return t;
  };
  double slowest = sum(plan.fused, c.backward);
  for (const auto& r : plan.forward) slowest = std::max(slowest, sum(r, c.forward));
  for (const auto& r : plan.backward) slowest = std::max(slowest, sum(r, c.backward));
  return std::max(plan.stageCount(), minStages) * slowest;
}

Plan balancedBoundPlan(const LayerCosts& c, int stages) {
  const int L = static_cast<int>(c.forward.size());
  if (stages < 1 || stages > L) {
    RP_THROW(InputError, "{} stages cannot split {} layers into contiguous non-empty stages", stages, L);
  }
  std::vector<double> prefix(static_cast<std::size_t>(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) {
    prefix[static_cast<std::size_t>(l) + 1] = prefix[static_cast<std::size_t>(l)] +
                                              c.forward[static_cast<std::size_t>(l)] +
                                              c.backward[static_cast<std::size_t>(l)];
  }
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][l]: the smallest possible largest-stage cost splitting layers [0, l) into s stages.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                        std::vector<double>(static_cast<std::size_t>(L) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(L) + 1, 0));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int l = s; l <= L; ++l) {
      for (int j = s - 1; j < l; ++j) {
        const double v = std::max(best[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(j)],
                                  prefix[static_cast<std::size_t>(l)] - prefix[static_cast<std::size_t>(j)]);
        if (v < best[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)]) {
          best[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)] = v;
          cut[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)] = j;
        }
      }
    }
  }
  std::vector<Range> ranges(static_cast<std::size_t>(stages));
  int end = L;
  for (int s = stages; s >= 1; --s) {
    const int begin = cut[static_cast<std::size_t>(s)][static_cast<std::size_t>(end)];
    ranges[static_cast<std::size_t>(s) - 1] = {begin, end};
    end = begin;
  }
  Plan plan;
  plan.forward.assign(ranges.begin(), ranges.end() - 1);
  plan.fused = ranges.back();
  plan.backward.assign(plan.forward.rbegin(), plan.forward.rend());
  validate(plan, L, "balanced plan");
  return plan;
}

}  // namespace rp::schedule
