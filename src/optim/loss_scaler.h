// Dynamic loss scaling for fp16 training, with torch.amp.GradScaler's rules: gradients are produced for
// loss * scale; a step whose gradients hold inf/NaN is skipped and the scale backs off; after
// `growthInterval` good steps in a row the scale grows.
#pragma once

#include <cstdint>

namespace rp::optim {

struct LossScalerConfig {
  double initScale = 65536.0;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  std::int64_t growthInterval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});
  double scale() const { return scale_; }
  // Call once per step with whether any gradient was non-finite; returns true if the step may proceed.
  bool update(bool foundNonFinite);
  std::int64_t goodSteps() const { return goodSteps_; }
  std::int64_t skippedSteps() const { return skipped_; }
  // For checkpoints.
  void restore(double scale, std::int64_t goodSteps, std::int64_t skippedSteps) {
    scale_ = scale;
    goodSteps_ = goodSteps;
    skipped_ = skippedSteps;
  }

 private:
  LossScalerConfig config_;
  double scale_;
  std::int64_t goodSteps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace rp::optim
