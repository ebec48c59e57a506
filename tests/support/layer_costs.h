// Synthetic per-layer costs for planner, dispatch and coordinator tests.
#pragma once

#include "schedule/partitioner.h"

namespace rp::test {

// Decoder layers of forward cost 1 (recompute + backward 2), a cheap embedding (0.05), a head costing
// `headCost` (backward twice that); bytes 1 per layer forward, 2 with gradients.
inline schedule::LayerCosts uniformLayerCosts(int decoderLayers, double headCost) {
  schedule::LayerCosts c;
  const int L = decoderLayers + 2;
  for (int l = 0; l < L; ++l) {
    const double f = l == 0 ? 0.05 : (l == L - 1 ? headCost : 1.0);
    c.forward.push_back(f);
    c.backward.push_back(2 * f);  // recompute + backward
    c.bytes.push_back(1.0);
    c.backwardBytes.push_back(2.0);
  }
  return c;
}

}  // namespace rp::test
