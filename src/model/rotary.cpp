// Rotary position embedding (model/layers.h, Rotary): the frequencies of each rope type as transformers computes
// them, and a microbatch's cos, sin, documents and window.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>

#include "model/layers.h"
#include "model/libtorch.h"

namespace rp::model {
namespace {

// YaRN (transformers' _compute_yarn_parameters): frequencies below the correction range are interpolated
// (divided by the factor), those above it kept, with a linear ramp between.
torch::Tensor yarnFrequencies(const torch::Tensor& extrapolated, const ModelConfig& c, const RopeConfig& r) {
  const double dim = static_cast<double>(c.headDim);
  auto correctionDim = [&](double rotations) {
    return dim * std::log(static_cast<double>(r.originalMaxPositions) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(r.theta));
  };
  double low = correctionDim(r.betaFast), high = correctionDim(r.betaSlow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const auto ramp = ((torch::arange(c.headDim / 2, torch::kFloat) - low) / (high - low)).clamp(0, 1);
  const auto extrapolationFactor = 1 - ramp;
  const auto interpolated = extrapolated / r.factor;
  return interpolated * (1 - extrapolationFactor) + extrapolated * extrapolationFactor;
}

// inv_freq exactly as transformers builds it (float32) over the rotary dims, then scaled by the rope type of `r`;
// longrope's with `factors` (short or long) dividing each frequency's base.
torch::Tensor inverseFrequencies(const ModelConfig& c, const RopeConfig& r, const std::vector<double>& factors = {}) {
  const auto dim = c.rotaryDim();
  auto exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat) / static_cast<double>(dim);
  const auto base = torch::pow(torch::scalar_tensor(r.theta, torch::kFloat), exponents);
  if (!factors.empty()) return 1.0 / (torch::tensor(factors, torch::kDouble).to(torch::kFloat) * base);
  auto invFreq = 1.0 / base;
  if (r.type == "linear") return invFreq / r.factor;
  if (r.type == "yarn") return yarnFrequencies(invFreq, c, r);
  if (r.type != "llama3") return invFreq;
  const double lowFreqWavelen = static_cast<double>(r.originalMaxPositions) / r.lowFreqFactor;
  const double highFreqWavelen = static_cast<double>(r.originalMaxPositions) / r.highFreqFactor;
  const auto wavelen = 2.0 * std::numbers::pi / invFreq;
  auto scaled = torch::where(wavelen > lowFreqWavelen, invFreq / r.factor, invFreq);
  const auto smooth =
      (static_cast<double>(r.originalMaxPositions) / wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
  const auto smoothed = (1.0 - smooth) * scaled / r.factor + smooth * scaled;
  const auto isMedium = (wavelen >= highFreqWavelen).logical_and(wavelen <= lowFreqWavelen);
  return torch::where(isMedium, smoothed, scaled);
}

// yarn's and longrope's attention factor on cos and sin, 1 for the other types.
double attentionScaling(const RopeConfig& r) {
  return r.type == "yarn" || r.type == "longrope" ? r.attentionFactor : 1.0;
}

}  // namespace

Rotary::Rotary(const ModelConfig& config)
    : float32_(config.rotaryInFloat32),
      interleaved_(config.interleavedRotary),
      invFreq_(inverseFrequencies(config, config.rope, config.rope.shortFactor)),
      longInvFreq_(config.rope.type == "longrope" ? inverseFrequencies(config, config.rope, config.rope.longFactor)
                                                  : torch::Tensor()),
      slidingInvFreq_(config.slidingRope ? inverseFrequencies(config, *config.slidingRope) : torch::Tensor()),
      originalMaxPositions_(config.rope.originalMaxPositions),
      scaling_(attentionScaling(config.rope)),
      slidingScaling_(config.slidingRope ? attentionScaling(*config.slidingRope) : 1.0),
      window_(std::find(config.slidingLayers.begin(), config.slidingLayers.end(), true) != config.slidingLayers.end()
                  ? config.slidingWindow
                  : 0) {}

std::pair<torch::Tensor, torch::Tensor> Rotary::cosSin(const torch::Tensor& positions, const torch::Tensor& invFreq,
                                                       double scaling, torch::ScalarType dtype) const {
  // [B, T, 1] x [1, 1, D/2] in float32, duplicated to [B, T, D] as transformers does.
  const auto freqs = positions.to(torch::kFloat).unsqueeze(-1) * invFreq.view({1, 1, -1});
  // GLM-4 takes the first half of cat(freqs, freqs) and repeats each entry twice: freqs interleaved with itself.
  const auto emb = interleaved_ ? freqs.repeat_interleave(2, -1) : torch::cat({freqs, freqs}, -1);
  const auto as = float32_ ? torch::kFloat : dtype;
  if (scaling == 1.0) return {emb.cos().to(as), emb.sin().to(as)};
  return {(emb.cos() * scaling).to(as), (emb.sin() * scaling).to(as)};
}

AttentionContext Rotary::context(const Batch& batch, torch::ScalarType dtype) const {
  AttentionContext ctx;
  // Longrope takes its long factors when the batch's largest position reaches past the original context
  // (transformers decides per forward on max(position_ids) + 1; here read on the host, where the batch is built).
  const bool longFactors =
      longInvFreq_.defined() && batch.positionIds.max().item<std::int64_t>() + 1 > originalMaxPositions_;
  std::tie(ctx.cos, ctx.sin) = cosSin(batch.positionIds, longFactors ? longInvFreq_ : invFreq_, scaling_, dtype);
  if (slidingInvFreq_.defined()) {
    std::tie(ctx.slidingCos, ctx.slidingSin) = cosSin(batch.positionIds, slidingInvFreq_, slidingScaling_, dtype);
  }
  ctx.documents = Documents::of(batch.segmentIds, batch.inputIds.size(0), batch.inputIds.size(1));
  // A batch already on a GPU (a single-process run there): the varlen kernel reads the offsets on it.
  if (!batch.inputIds.is_cpu()) ctx.documents.cumulative = ctx.documents.cumulative.to(batch.inputIds.device());
  ctx.window = window_;
  return ctx;
}

}  // namespace rp::model
