#include "coordinator/profile.h"

#include <algorithm>
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

void SpeedModel::update(int rank, const std::vector<double>& forwardMs, const std::vector<double>& backwardMs) {
  auto& t = times_[static_cast<std::size_t>(rank)];
  const auto L = static_cast<std::size_t>(layers_);
  for (std::size_t k = 0; k < 2 * L; ++k) {
    const double ms = k < L ? forwardMs[k] : backwardMs[k - L];
    if (!(ms > 0) || !std::isfinite(ms)) continue;
    t[k] = t[k] < 0 ? ms : kSmooth * t[k] + (1 - kSmooth) * ms;
    measured_ = true;
  }
}

SpeedModel::Fit SpeedModel::fit() const {
  const std::size_t ranks = times_.size(), cells = 2 * static_cast<std::size_t>(layers_);
  std::vector<double> speed(ranks, 1.0), cost(cells, -1.0);
  std::vector<bool> seen(ranks, false);
  auto fitCosts = [&] {
    for (std::size_t k = 0; k < cells; ++k) {
      double sum = 0;
      int n = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        if (times_[r][k] > 0) sum += times_[r][k] * speed[r], ++n;
      }
      cost[k] = n > 0 ? sum / n : -1.0;
    }
  };
  // Alternating least squares on time = cost / speed; 50 rounds (each ranks x cells) settle far below timing
  // noise on any connected set of observations.
  for (int round = 0; round < 50; ++round) {
    fitCosts();
    double fastest = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      double predicted = 0, measured = 0;
      for (std::size_t k = 0; k < cells; ++k) {
        if (times_[r][k] > 0) predicted += cost[k], measured += times_[r][k];
      }
      seen[r] = measured > 0;
      if (seen[r]) speed[r] = predicted / measured, fastest = std::max(fastest, speed[r]);
    }
    for (std::size_t r = 0; r < ranks; ++r) speed[r] = seen[r] && fastest > 0 ? speed[r] / fastest : 1.0;
  }
  fitCosts();  // at the fastest rank's speed
  const auto L = static_cast<std::size_t>(layers_);
  return {speed,
          {cost.begin(), cost.begin() + static_cast<std::ptrdiff_t>(L)},
          {cost.begin() + static_cast<std::ptrdiff_t>(L), cost.end()}};
}

}  // namespace rp::coordinator
