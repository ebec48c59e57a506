#include "optim/loss_scaler.h"

#include "common/error.h"

namespace rp::optim {

LossScaler::LossScaler(LossScalerConfig config) : config_(config), scale_(config.initScale) {
  if (config.initScale <= 0 || config.growthFactor <= 1.0 || config.backoffFactor <= 0 || config.backoffFactor >= 1.0 ||
      config.growthInterval < 1) {
    RP_THROW(InputError,
             "loss scaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
             "growth_interval >= 1");
  }
}

bool LossScaler::update(bool foundNonFinite) {
  if (foundNonFinite) {
    scale_ *= config_.backoffFactor;
    goodSteps_ = 0;
    ++skipped_;
    return false;
  }
  if (++goodSteps_ == config_.growthInterval) {
    scale_ *= config_.growthFactor;
    goodSteps_ = 0;
  }
  return true;
}

}  // namespace rp::optim
