#include "coordinator/profile.h"

#include <cmath>

namespace rp::coordinator {

void LayerProfile::update(const std::vector<double>& forwardMs, const std::vector<double>& backwardMs) {
  if (seen_++ == 0) return;  // the first iteration includes warm-up
  ++updates_;
  for (std::size_t l = 0; l < forward_.size(); ++l) {
    if (forwardMs[l] >= 0) {
      forward_[l] = kSmooth * forward_[l] + (1 - kSmooth) * forwardMs[l];
      ++forwardN_[l];
    }
    if (backwardMs[l] >= 0) {
      backward_[l] = kSmooth * backward_[l] + (1 - kSmooth) * backwardMs[l];
      ++backwardN_[l];
    }
  }
}

namespace {
double corrected(double ema, std::int64_t samples) {
  return samples == 0 ? 0.0 : ema / (1 - std::pow(LayerProfile::kSmooth, static_cast<double>(samples)));
}
}  // namespace

double LayerProfile::forward(int layer) const {
  return corrected(forward_[static_cast<std::size_t>(layer)], forwardN_[static_cast<std::size_t>(layer)]);
}

double LayerProfile::backward(int layer) const {
  return corrected(backward_[static_cast<std::size_t>(layer)], backwardN_[static_cast<std::size_t>(layer)]);
}

schedule::LayerCosts LayerProfile::applyTo(schedule::LayerCosts costs) const {
  if (!ready()) return costs;
  for (std::size_t l = 0; l < forward_.size(); ++l) {
    costs.forward[l] = forward(static_cast<int>(l));
    costs.backward[l] = backward(static_cast<int>(l));
  }
  return costs;
}

}  // namespace rp::coordinator
