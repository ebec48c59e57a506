#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace rp::optim {

AdamWStepScalars stepScalars(const AdamWConfig& c, double lr, std::int64_t step) {
  RP_CHECK(step >= 1, "AdamW step counts from 1, got {}", step);
  const double biasCorrection1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
  const double biasCorrection2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
  return AdamWStepScalars{
      static_cast<float>(1.0 - lr * c.weightDecay),
      static_cast<float>(1.0 - c.beta1),
      static_cast<float>(c.beta2),
      static_cast<float>(1.0 - c.beta2),
      static_cast<float>(lr / biasCorrection1),
      static_cast<float>(std::sqrt(biasCorrection2)),
      static_cast<float>(c.eps),
  };
}

// torch.optim.AdamW, _single_tensor_adamw, in the same float32 operations:
//   param *= 1 - lr*wd
//   m = lerp(m, g, 1-beta1)             (m + w*(g - m) for w < 0.5)
//   v = v*beta2 + (1-beta2)*g*g
//   vmax = max(vmax, v)                 (amsgrad)
//   denom = sqrt(v or vmax) / sqrt(1 - beta2^t) + eps
//   param += -(lr / (1 - beta1^t)) * m / denom
void adamwScalar(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& x) {
  for (std::size_t i = 0; i < x.n; ++i) {
    const float g = x.grad[i];
    float p = x.param[i] * s.decay;
    float m = x.expAvg[i];
    m = s.oneMinusBeta1 < 0.5f ? m + s.oneMinusBeta1 * (g - m) : g - (g - m) * (1.0f - s.oneMinusBeta1);
    float v = x.expAvgSq[i] * s.beta2;
    v = v + s.oneMinusBeta2 * g * g;
    float second = v;
    if (amsgrad) {
      x.maxExpAvgSq[i] = std::max(x.maxExpAvgSq[i], v);
      second = x.maxExpAvgSq[i];
    }
    const float denom = std::sqrt(second) / s.biasCorrection2Sqrt + s.eps;
    p = p + (-s.stepSize) * (m / denom);
    x.param[i] = p;
    x.expAvg[i] = m;
    x.expAvgSq[i] = v;
  }
}

AdamW::AdamW(AdamWConfig config, AdamWKernel kernel) : config_(config), kernel_(kernel) {
  RP_CHECK(kernel_ != nullptr, "AdamW needs a kernel");
}

std::size_t AdamW::add(std::string name, float* param, const float* grad, std::size_t n) {
  Param p{std::move(name), param, grad, n, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), {}};
  if (config_.amsgrad) p.maxExpAvgSq.assign(n, 0.0f);
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

void AdamW::step(double lr) {
  ++step_;
  const AdamWStepScalars s = stepScalars(config_, lr, step_);
  for (auto& p : params_) {
    kernel_(s, config_.amsgrad,
            AdamWSlice{p.param, p.grad, p.expAvg.data(), p.expAvgSq.data(),
                       config_.amsgrad ? p.maxExpAvgSq.data() : nullptr, p.n});
  }
}

}  // namespace rp::optim
