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

// Per-worker speed for earliest-finish dispatch (docs/schedule.md, "Uneven workers"). Each rank's measured
// per-layer times are kept apart (a moving average per rank, layer and direction, rate kSmooth), and fitted to
// the model "time = cost(layer) / speed(rank)" by alternating least squares: costs from the speeds, speeds from
// the costs, until they settle. A pooled profile could not tell a slow worker from an expensive layer where the
// same worker keeps running the same layers (round-robin with as many jobs as workers does exactly that); the
// fit can wherever the ranks' layers overlap over time, and otherwise keeps every speed at 1.
class SpeedModel {
 public:
  SpeedModel(int ranks, int layers)
      : layers_(layers),
        times_(static_cast<std::size_t>(ranks), std::vector<double>(2 * static_cast<std::size_t>(layers), -1.0)) {}

  static constexpr double kSmooth = 0.8;

  // One iteration of rank `rank`: milliseconds per microbatch per layer, negative = not measured.
  void update(int rank, const std::vector<double>& forwardMs, const std::vector<double>& backwardMs);
  bool measured() const { return measured_; }

  struct Fit {
    std::vector<double> speed;              // per rank, relative to the fastest (1 where never measured)
    std::vector<double> forward, backward;  // per layer, ms at the fastest rank's speed; negative = never measured
  };
  Fit fit() const;

 private:
  int layers_;
  std::vector<std::vector<double>> times_;  // [rank][forward layers..., backward layers...]
  bool measured_ = false;
};

}  // namespace rp::coordinator
