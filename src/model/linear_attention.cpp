#include "model/linear_attention.h"

#include <cmath>
#include <limits>

#include "model/libtorch.h"

namespace rp::model {
namespace {

// transformers' l2norm (as the FLA library): x * rsqrt(sum(x^2) + eps) over the last dimension.
torch::Tensor l2norm(const torch::Tensor& x) {
  return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6);
}

}  // namespace

torch::Tensor chunkGatedDeltaRule(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
                                  const torch::Tensor& g0, const torch::Tensor& beta0, std::int64_t C) {
  const auto dtype = v0.scalar_type();
  const auto R = v0.size(0), L = v0.size(1), Hv = v0.size(2), dv = v0.size(3), dk = k0.size(3);
  const auto groups = Hv / k0.size(2);
  // Each q/k head serves `groups` consecutive value heads; [R, H, L, d] in float32.
  auto heads = [&](const torch::Tensor& t, bool grouped) {
    const auto spread = grouped && groups > 1 ? t.repeat_interleave(groups, 2) : t;
    return spread.transpose(1, 2).to(torch::kFloat).contiguous();
  };
  auto q = l2norm(heads(q0, true)), k = l2norm(heads(k0, true));
  auto v = heads(v0, false);
  auto beta = beta0.transpose(1, 2).to(torch::kFloat), g = g0.transpose(1, 2).to(torch::kFloat);
  q = q * (1.0 / std::sqrt(static_cast<double>(dk)));
  const auto pad = (C - L % C) % C;
  if (pad > 0) {
    namespace F = torch::nn::functional;
    q = F::pad(q, F::PadFuncOptions({0, 0, 0, pad}));
    k = F::pad(k, F::PadFuncOptions({0, 0, 0, pad}));
    v = F::pad(v, F::PadFuncOptions({0, 0, 0, pad}));
    beta = F::pad(beta, F::PadFuncOptions({0, pad}));
    g = F::pad(g, F::PadFuncOptions({0, pad}));
  }
  const auto n = (L + pad) / C;
  auto chunks = [&](const torch::Tensor& t) { return t.reshape({R, Hv, n, C, t.size(-1)}); };
  const auto vBeta = chunks(v * beta.unsqueeze(-1));
  const auto kBeta = chunks(k * beta.unsqueeze(-1));
  q = chunks(q);
  k = chunks(k);
  const auto cum = g.reshape({R, Hv, n, C}).cumsum(-1);
  const auto upper = torch::ones({C, C}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  // exp(cum_i - cum_j): the decay from position j to i of a chunk, 0 above the diagonal.
  const auto pairDecay =
      (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(upper, -std::numeric_limits<float>::infinity()).exp();
  const auto system = torch::matmul(kBeta, k.transpose(-1, -2)) * pairDecay;
  const auto intra = torch::matmul(q, k.transpose(-1, -2)) * pairDecay;
  const auto decayedKBeta = kBeta * cum.exp().unsqueeze(-1);
  // (I + strictly lower part of `system`) X = B: the chunk's delta-rule updates at once (the UT transform).
  const auto values =
      at::linalg_solve_triangular(system, vBeta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  const auto kCum =
      at::linalg_solve_triangular(system, decayedKBeta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  q = q * cum.exp().unsqueeze(-1);
  k = k * (cum.narrow(-1, C - 1, 1) - cum).exp().unsqueeze(-1);
  const auto chunkDecay = cum.select(-1, C - 1).exp().unsqueeze(-1).unsqueeze(-1);  // [R, H, n, 1, 1]
  auto state = torch::zeros({R, Hv, dk, dv}, q.options());
  std::vector<torch::Tensor> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto fresh = values.select(2, i) - torch::matmul(kCum.select(2, i), state);
    out.push_back(torch::matmul(q.select(2, i), state) + torch::matmul(intra.select(2, i), fresh));
    state = state * chunkDecay.select(2, i) + torch::matmul(k.select(2, i).transpose(-1, -2), fresh);
  }
  return torch::stack(out, 2).reshape({R, Hv, n * C, dv}).narrow(2, 0, L).transpose(1, 2).to(dtype).contiguous();
}

GatedDeltaNet::GatedDeltaNet(const ModelConfig& c, const ParamOptions& o) : c_(c.linearAttention), eps_(c.rmsNormEps) {
  const auto keyDim = c_.numKeyHeads * c_.keyHeadDim, valueDim = c_.numValueHeads * c_.valueHeadDim;
  const auto convDim = 2 * keyDim + valueDim;
  inQkv_ = register_module("in_proj_qkv", std::make_shared<Projection>(c.hiddenSize, convDim, false, o));
  inZ_ = register_module("in_proj_z", std::make_shared<Projection>(c.hiddenSize, valueDim, false, o));
  inB_ = register_module("in_proj_b", std::make_shared<Projection>(c.hiddenSize, c_.numValueHeads, false, o));
  inA_ = register_module("in_proj_a", std::make_shared<Projection>(c.hiddenSize, c_.numValueHeads, false, o));
  out_ = register_module("out_proj", std::make_shared<Projection>(valueDim, c.hiddenSize, false, o));
  convWeight = register_parameter("conv_weight", newParameter({convDim, 1, c_.convKernel}, o));
  dtBias = register_parameter("dt_bias", newParameter({c_.numValueHeads}, o, 1.0));
  aLog = register_parameter("a_log", newParameter({c_.numValueHeads}, o, 0.0));
  normWeight = register_parameter("norm_weight", newParameter({c_.valueHeadDim}, o, 1.0));
}

torch::Tensor GatedDeltaNet::mix(const torch::Tensor& qkv, const torch::Tensor& beta, const torch::Tensor& g) const {
  const auto R = qkv.size(0), L = qkv.size(1);
  // The causal depthwise convolution (transformers' causal_conv1d_fn): K - 1 zeros before the run, then SiLU.
  const auto convolved =
      torch::silu(
          torch::conv1d(qkv.transpose(1, 2), convWeight, {}, 1, c_.convKernel - 1, 1, qkv.size(2)).narrow(-1, 0, L))
          .transpose(1, 2);
  const auto keyDim = c_.numKeyHeads * c_.keyHeadDim;
  const auto q = convolved.narrow(-1, 0, keyDim).reshape({R, L, c_.numKeyHeads, c_.keyHeadDim});
  const auto k = convolved.narrow(-1, keyDim, keyDim).reshape({R, L, c_.numKeyHeads, c_.keyHeadDim});
  const auto v = convolved.narrow(-1, 2 * keyDim, c_.numValueHeads * c_.valueHeadDim)
                     .reshape({R, L, c_.numValueHeads, c_.valueHeadDim});
  return chunkGatedDeltaRule(q, k, v, g, beta);
}

torch::Tensor GatedDeltaNet::forward(const torch::Tensor& x, const Documents& documents) const {
  const auto B = x.size(0), T = x.size(1);
  const auto qkv = inQkv_->forward(x);
  const auto beta = torch::sigmoid(inB_->forward(x));
  const auto g = -aLog.to(torch::kFloat).exp() * torch::softplus(inA_->forward(x).to(torch::kFloat) + dtBias);
  torch::Tensor core;  // [B, T, Hv, dv]
  if (documents.onePerRow()) {
    core = mix(qkv, beta, g);
  } else {  // each document alone: a fresh state and convolution window
    std::vector<torch::Tensor> parts;
    const auto flat = [](const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); };
    const auto qkvFlat = flat(qkv), betaFlat = flat(beta), gFlat = flat(g);
    for (std::int64_t d = 0; d < documents.count(); ++d) {
      const auto begin = documents.offsets[d], length = documents.offsets[d + 1] - begin;
      parts.push_back(mix(qkvFlat.narrow(0, begin, length).unsqueeze(0), betaFlat.narrow(0, begin, length).unsqueeze(0),
                          gFlat.narrow(0, begin, length).unsqueeze(0))
                          .squeeze(0));
    }
    core = torch::cat(parts, 0).reshape({B, T, c_.numValueHeads, c_.valueHeadDim});
  }
  // Qwen3_5RMSNormGated: normalised in float32, times the weight in the input's dtype, times SiLU(z) in float32.
  const auto z = inZ_->forward(x).reshape({B, T, c_.numValueHeads, c_.valueHeadDim});
  const auto dtype = core.scalar_type();
  const auto c32 = core.to(torch::kFloat);
  const auto normed = normWeight * (c32 * torch::rsqrt(c32.pow(2).mean(-1, true) + eps_)).to(dtype);
  const auto gated = (normed * torch::silu(z.to(torch::kFloat))).to(dtype);
  return out_->forward(gated.reshape({B, T, c_.numValueHeads * c_.valueHeadDim}));
}

Projection* GatedDeltaNet::projection(const std::string& name) const {
  if (name == "in_proj_qkv") return inQkv_.get();
  if (name == "in_proj_z") return inZ_.get();
  if (name == "in_proj_b") return inB_.get();
  if (name == "in_proj_a") return inA_.get();
  if (name == "out_proj") return out_.get();
  return nullptr;
}

std::vector<NamedTensor> GatedDeltaNet::hfParameters(const std::string& prefix) const {
  return {{prefix + "A_log", aLog},
          {prefix + "conv1d.weight", convWeight},
          {prefix + "dt_bias", dtBias},
          {prefix + "in_proj_a.weight", inA_->weight},
          {prefix + "in_proj_b.weight", inB_->weight},
          {prefix + "in_proj_qkv.weight", inQkv_->weight},
          {prefix + "in_proj_z.weight", inZ_->weight},
          {prefix + "norm.weight", normWeight},
          {prefix + "out_proj.weight", out_->weight}};
}

}  // namespace rp::model
