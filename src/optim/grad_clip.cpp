#include "optim/grad_clip.h"

#include <cmath>

namespace rp::optim {

double sumOfSquares(std::span<const GradBuffer> grads) {
  double sumSq = 0.0;
  for (const auto& g : grads) {
    for (std::size_t i = 0; i < g.n; ++i) sumSq += static_cast<double>(g.data[i]) * g.data[i];
  }
  return sumSq;
}

double globalGradNorm(std::span<const GradBuffer> grads) {
  return std::sqrt(sumOfSquares(grads));
}

void clipToNorm(std::span<const GradBuffer> grads, double norm, double maxNorm) {
  if (maxNorm <= 0.0) return;
  const double coef = maxNorm / (norm + 1e-6);
  if (coef >= 1.0) return;
  const auto c = static_cast<float>(coef);
  for (const auto& g : grads) {
    for (std::size_t i = 0; i < g.n; ++i) g.data[i] *= c;
  }
}

double clipGradNorm(std::span<const GradBuffer> grads, double maxNorm) {
  const double norm = globalGradNorm(grads);
  clipToNorm(grads, norm, maxNorm);
  return norm;
}

}  // namespace rp::optim
