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

std::vector<Range> minMaxSplit(const std::vector<double>& cost, int e, int k) {
  RP_CHECK(k >= 1 && k <= e && e <= static_cast<int>(cost.size()), "cannot split [0, {}) into {} stages", e, k);
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

Plan balancedBoundPlan(const LayerCosts& c, int stages) {
  const int L = static_cast<int>(c.forward.size());
  if (stages < 1 || stages > L) {
    RP_THROW(InputError, "{} stages cannot split {} layers into contiguous non-empty stages", stages, L);
  }
  std::vector<double> cost(static_cast<std::size_t>(L));
  for (std::size_t l = 0; l < cost.size(); ++l) cost[l] = c.forward[l] + c.backward[l];
  const std::vector<Range> ranges = minMaxSplit(cost, L, stages);
  Plan plan;
  plan.forward.assign(ranges.begin(), ranges.end() - 1);
  plan.fused = ranges.back();
  plan.backward.assign(plan.forward.rbegin(), plan.forward.rend());
  validate(plan, L, "balanced plan");
  return plan;
}

}  // namespace rp::schedule
