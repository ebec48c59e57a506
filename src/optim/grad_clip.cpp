#include "optim/grad_clip.h"

#include <cmath>

namespace rp::optim {

double globalGradNorm(std::span<const GradBuffer> grads) {
  double sumSq = 0.0;
  for (const auto& g : grads) {
    for (std::size_t i = 0; i < g.n; ++i) sumSq += static_cast<double>(g.data[i]) * g.data[i];
  }
  return std::sqrt(sumSq);
}

double clipGradNorm(std::span<const GradBuffer> grads, double maxNorm) {
  const double norm = globalGradNorm(grads);
  if (maxNorm <= 0.0) return norm;
  const double coef = maxNorm / (norm + 1e-6);
  if (coef < 1.0) {
    const auto c = static_cast<float>(coef);
    for (const auto& g : grads) {
      for (std::size_t i = 0; i < g.n; ++i) g.data[i] *= c;
    }
  }
  return norm;
}

}  // namespace rp::optim
