// Execution plans as data (docs/schedule.md). Layer indices cover the whole layer list: 0 is the embedding
// (prefix), 1..n the decoder layers, n+1 the head with the loss (postfix); L = n + 2.
// A RoundPipe plan has forward stages over [0, e), one fused stage over [e, L) (forward, loss and backward
// at once; it always holds the head) and backward stages over [0, e), listed deepest first.
// Torch-free; plans are plain values shared by the runtime and (later) the simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rp::schedule {

struct Range {
  int begin = 0;  // first layer
  int end = 0;    // one past the last layer
  int size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct Plan {
  std::vector<Range> forward;   // ascending, covering [0, e)
  Range fused;                  // [e, L)
  std::vector<Range> backward;  // deepest first, covering [0, e) read in reverse

  int layerCount() const { return fused.end; }
  int stageCount() const { return static_cast<int>(forward.size() + 1 + backward.size()); }
  bool operator==(const Plan&) const = default;
};

// Throws InputError naming the rule that is broken (`what` prefixes the message, e.g. the config key).
void validate(const Plan& plan, int layerCount, const std::string& what);

// "fwd 0-2,3-5 | fused 6-7 | bwd 4-5,2-3,0-1" (inclusive layer numbers), for logs.
std::string describe(const Plan& plan);

// A plan from per-stage layer counts, the form the config takes: forward counts (ascending), the fused
// stage's decoder-layer count (the head is always added), backward counts (deepest first).
Plan planFromCounts(const std::vector<int>& forward, int fusedDecoderLayers, const std::vector<int>& backward,
                    int layerCount);

// Parses the config form "F1,F2,... | fused | B1,B2,...": forward stage sizes, the fused stage's decoder
// layers, backward stage sizes deepest first (layers counted in the plan's index space: the embedding is a
// layer, the head is added to the fused stage). Validates; errors name `what`.
Plan parsePlan(const std::string& text, int layerCount, const std::string& what);
// The inverse: a plan in the config form ("3,2 | 1 | 2,3").
std::string formatPlan(const Plan& plan);

}  // namespace rp::schedule
