// Per-layer timing profile for the partitioner (docs/schedule.md, "Profiles"): the reference's estimator.
// Each update is one iteration's measured per-layer forward and backward times; estimates are an
// exponential moving average (rate 0.9) started from zero and bias-corrected Adam-style (divided by
// 1 - 0.9^n, n counted per layer and direction); the first measured iteration is dropped (warm-up). Layers
// without a measurement in an update keep their estimate.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/partitioner.h"

namespace rp::coordinator {

class LayerProfile {
 public:
  explicit LayerProfile(int layers)
      : forward_(static_cast<std::size_t>(layers), 0.0),
        backward_(forward_),
        forwardN_(static_cast<std::size_t>(layers), 0),
        backwardN_(forwardN_) {}

  static constexpr double kSmooth = 0.9;

  // Times in milliseconds per microbatch; negative = not measured.
  void update(const std::vector<double>& forwardMs, const std::vector<double>& backwardMs);
  bool ready() const { return updates_ >= 1; }
  double forward(int layer) const;
  double backward(int layer) const;
  // The measured estimates in place of a proxy's times (bytes unchanged).
  schedule::LayerCosts applyTo(schedule::LayerCosts costs) const;

 private:
  std::vector<double> forward_, backward_;
  std::vector<std::int64_t> forwardN_, backwardN_;  // samples per layer
  std::int64_t seen_ = 0;                           // updates offered, including the dropped first one
  std::int64_t updates_ = 0;                        // updates applied
};

}  // namespace rp::coordinator
