#include "model/layers.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/libtorch.h"
#include "model/linear_attention.h"
#include "model/linear_cross_entropy.h"
#include "model/lora.h"

namespace rp::model {
namespace {

// transformers' rotate_half: (x1, x2) -> (-x2, x1) on the two halves of the last dimension.
torch::Tensor rotateHalf(const torch::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// GLM-4's rotate_half: each pair (x0, x1) -> (-x1, x0).
torch::Tensor rotatePairs(const torch::Tensor& x) {
  const auto pairs = x.unflatten(-1, {-1, 2});
  return torch::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).flatten(-2);
}

// Rotates the first cos.size(-1) dims of each head (all of them but with a partial_rotary_factor); the rest pass
// through, as transformers' Phi-3 and GLM-4 apply_rotary_pos_emb. `interleaved`: GLM-4's pairs, cos and sin
// built interleaved too (Rotary::context).
torch::Tensor applyRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          bool interleaved) {
  const auto rotary = cos.size(-1);
  const auto part = rotary == x.size(-1) ? x : x.narrow(-1, 0, rotary);
  auto rotated = part * cos + (interleaved ? rotatePairs(part) : rotateHalf(part)) * sin;
  // cos and sin in float32 (OLMo 2) rotate in float32; the result goes back to x's dtype, as transformers does.
  if (rotated.scalar_type() != x.scalar_type()) rotated = rotated.to(x.scalar_type());
  if (rotary == x.size(-1)) return rotated;
  return torch::cat({rotated, x.narrow(-1, rotary, x.size(-1) - rotary)}, -1);
}

}  // namespace

torch::Tensor newParameter(at::IntArrayRef sizes, const ParamOptions& options, std::optional<double> fill) {
  const auto o = torch::TensorOptions().dtype(options.dtype);
  if (!options.allocate && options.placeholderDevice.is_meta()) return torch::empty(sizes, o.device(torch::kMeta));
  if (!options.allocate) {
    const std::vector<std::int64_t> strides(sizes.size(), 0);
    return torch::empty({0}, o).set_(torch::empty({1}, o).storage(), 0, sizes, strides);
  }
  return fill ? torch::full(sizes, *fill, o) : torch::empty(sizes, o);
}

Batch causalBatch(const torch::Tensor& inputIds) {
  RP_CHECK(inputIds.dim() == 2, "inputIds must be [B, T], got {} dims", inputIds.dim());
  Batch batch;
  batch.inputIds = inputIds.to(torch::kInt64);
  const auto T = inputIds.size(1);
  batch.positionIds = torch::arange(T, torch::kInt64).unsqueeze(0).expand({inputIds.size(0), T}).contiguous();
  batch.targets = torch::full_like(batch.inputIds, kIgnoreIndex);
  if (T > 1) batch.targets.narrow(1, 0, T - 1).copy_(batch.inputIds.narrow(1, 1, T - 1));
  return batch;
}

RmsNorm::RmsNorm(std::int64_t dim, double eps, const ParamOptions& options, NormStyle style)
    : eps_(eps), style_(style) {
  weight = register_parameter("weight", newParameter({dim}, options, style == NormStyle::kGemma ? 0.0 : 1.0));
}

torch::Tensor RmsNorm::forward(const torch::Tensor& x) const {
  const auto xf = x.to(torch::kFloat);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  switch (style_) {
    case NormStyle::kGemma:
      return (normed * (1.0 + weight.to(torch::kFloat))).to(x.scalar_type());
    case NormStyle::kOlmo2:
      return (weight * normed).to(x.scalar_type());
    case NormStyle::kLlama:
      break;
  }
  return weight * normed.to(x.scalar_type());
}

Projection::Projection(std::int64_t in, std::int64_t out, bool withBias, const ParamOptions& options)
    : in_(in), out_(out) {
  if (options.nf4Base) {
    packing_ = Nf4Packing{{out, in}, options.doubleQuant};
    weight = register_buffer("weight", newParameter({packing_->bytes()}, {torch::kUInt8, options.allocate}));
  } else {
    weight = register_parameter("weight", newParameter({out, in}, options));
  }
  if (withBias) bias = register_parameter("bias", newParameter({out}, options, 0.0));
}

torch::Tensor Projection::forward(const torch::Tensor& x) const {
  auto y = packing_ ? linearNf4(x, weight, *packing_, bias) : torch::linear(x, weight, bias);
  if (lora_) y = y + lora_->delta(x);
  return y;
}

void Projection::attach(std::shared_ptr<LoraAdapter> adapter) {
  RP_CHECK(!lora_, "projection already has a LoRA adapter");
  lora_ = register_module("lora", std::move(adapter));
}

namespace {
void appendProjection(std::vector<NamedTensor>& out, const std::string& name, const Projection& p) {
  out.emplace_back(name + ".weight", p.weight);
  if (p.bias.defined()) out.emplace_back(name + ".bias", p.bias);
}
}  // namespace

Attention::Attention(const ModelConfig& c, bool sliding, const ParamOptions& o)
    : numHeads_(c.numHeads),
      numKvHeads_(c.numKvHeads),
      headDim_(c.headDim),
      scale_(c.attentionScale > 0 ? c.attentionScale : 1.0 / std::sqrt(static_cast<double>(c.headDim))),
      softcap_(c.attentionSoftcap),
      sliding_(sliding),
      gated_(c.gatedAttention),
      qkNormFullWidth_(c.qkNormFullWidth),
      interleaved_(c.interleavedRotary) {
  if (c.fusedQkv) {
    qkv_ = register_module(
        "qkv_proj", std::make_shared<Projection>(c.hiddenSize, (c.numHeads + 2 * c.numKvHeads) * c.headDim, false, o));
  } else {
    q_ = register_module("q_proj", std::make_shared<Projection>(c.hiddenSize, (gated_ ? 2 : 1) * c.numHeads * c.headDim,
                                                                c.attentionBias, o));
    k_ = register_module("k_proj",
                         std::make_shared<Projection>(c.hiddenSize, c.numKvHeads * c.headDim, c.attentionBias, o));
    v_ = register_module("v_proj",
                         std::make_shared<Projection>(c.hiddenSize, c.numKvHeads * c.headDim, c.attentionBias, o));
  }
  o_ = register_module("o_proj",
                       std::make_shared<Projection>(c.numHeads * c.headDim, c.hiddenSize, c.attentionOutputBias, o));
  if (c.qkNorm) {
    qNorm_ = register_module("q_norm", std::make_shared<RmsNorm>(c.headDim, c.rmsNormEps, o, c.normStyle));
    kNorm_ = register_module("k_norm", std::make_shared<RmsNorm>(c.headDim, c.rmsNormEps, o, c.normStyle));
  } else if (c.qkNormFullWidth) {
    qNorm_ = register_module("q_norm", std::make_shared<RmsNorm>(c.numHeads * c.headDim, c.rmsNormEps, o, c.normStyle));
    kNorm_ =
        register_module("k_norm", std::make_shared<RmsNorm>(c.numKvHeads * c.headDim, c.rmsNormEps, o, c.normStyle));
  }
  if (c.attentionSinks) sinks_ = register_parameter("sinks", newParameter({c.numHeads}, o, 0.0));
}

torch::Tensor Attention::forward(const torch::Tensor& x, const AttentionContext& ctx) const {
  const auto B = x.size(0);
  const auto T = x.size(1);
  torch::Tensor q, k, v;
  if (qkv_) {
    const auto qkv = qkv_->forward(x);
    const auto qWidth = numHeads_ * headDim_, kvWidth = numKvHeads_ * headDim_;
    q = qkv.narrow(-1, 0, qWidth);
    k = qkv.narrow(-1, qWidth, kvWidth);
    v = qkv.narrow(-1, qWidth + kvWidth, kvWidth);
  } else {
    q = q_->forward(x), k = k_->forward(x), v = v_->forward(x);
  }
  torch::Tensor gate;
  if (gated_) {  // per head: the query's head_dim, then the gate's
    const auto both = q.view({B, T, numHeads_, 2 * headDim_});
    q = both.narrow(-1, 0, headDim_);
    gate = both.narrow(-1, headDim_, headDim_).reshape({B, T, numHeads_ * headDim_});
  }
  if (qkNormFullWidth_) {  // OLMo 2: over the whole projections, before the heads split
    q = qNorm_->forward(q);
    k = kNorm_->forward(k);
  }
  q = q.reshape({B, T, numHeads_, headDim_});
  k = k.reshape({B, T, numKvHeads_, headDim_});
  v = v.reshape({B, T, numKvHeads_, headDim_}).transpose(1, 2);
  if (qNorm_ && !qkNormFullWidth_) {
    q = qNorm_->forward(q);
    k = kNorm_->forward(k);
  }
  q = q.transpose(1, 2);  // [B, H, T, D]
  k = k.transpose(1, 2);
  const bool ownRope = sliding_ && ctx.slidingCos.defined();
  const auto cos = (ownRope ? ctx.slidingCos : ctx.cos).unsqueeze(1);
  const auto sin = (ownRope ? ctx.slidingSin : ctx.sin).unsqueeze(1);
  q = applyRotary(q, cos, sin, interleaved_);
  k = applyRotary(k, cos, sin, interleaved_);
  AttendOptions options{.scale = scale_, .window = sliding_ ? ctx.window : 0, .sinks = sinks_, .softcap = softcap_};
  RP_CHECK(!sliding_ || options.window > 0, "a sliding-window layer needs the context's window");
  const auto attended = attend(q, k, v, ctx.documents, options).reshape({B, T, numHeads_ * headDim_});
  return o_->forward(gated_ ? attended * torch::sigmoid(gate) : attended);
}

Projection* Attention::projection(const std::string& name) const {
  if (name == "qkv") return qkv_.get();
  if (name == "q") return q_.get();
  if (name == "k") return k_.get();
  if (name == "v") return v_.get();
  if (name == "o") return o_.get();
  return nullptr;
}

std::vector<NamedTensor> Attention::hfParameters(const std::string& prefix) const {
  std::vector<NamedTensor> out;
  if (qkv_) {
    appendProjection(out, prefix + "qkv_proj", *qkv_);
  } else {
    appendProjection(out, prefix + "q_proj", *q_);
    appendProjection(out, prefix + "k_proj", *k_);
    appendProjection(out, prefix + "v_proj", *v_);
  }
  appendProjection(out, prefix + "o_proj", *o_);
  if (qNorm_) {
    out.emplace_back(prefix + "q_norm.weight", qNorm_->weight);
    out.emplace_back(prefix + "k_norm.weight", kNorm_->weight);
  }
  if (sinks_.defined()) out.emplace_back(prefix + "sinks", sinks_);
  return out;
}

Mlp::Mlp(const ModelConfig& c, const ParamOptions& o) : activation_(c.activation) {
  if (c.fusedGateUp) {
    gateUp_ = register_module("gate_up_proj",
                              std::make_shared<Projection>(c.hiddenSize, 2 * c.intermediateSize, c.mlpBias, o));
  } else {
    gate_ = register_module("gate_proj", std::make_shared<Projection>(c.hiddenSize, c.intermediateSize, c.mlpBias, o));
    up_ = register_module("up_proj", std::make_shared<Projection>(c.hiddenSize, c.intermediateSize, c.mlpBias, o));
  }
  down_ = register_module("down_proj", std::make_shared<Projection>(c.intermediateSize, c.hiddenSize, c.mlpBias, o));
}

torch::Tensor Mlp::forward(const torch::Tensor& x) const {
  torch::Tensor gate, up;
  if (gateUp_) {
    const auto both = gateUp_->forward(x);
    const auto width = both.size(-1) / 2;
    gate = both.narrow(-1, 0, width), up = both.narrow(-1, width, width);
  } else {
    gate = gate_->forward(x), up = up_->forward(x);
  }
  const auto activated = activation_ == Activation::kSilu ? torch::silu(gate) : torch::gelu(gate, "tanh");
  return down_->forward(activated * up);
}

Projection* Mlp::projection(const std::string& name) const {
  if (name == "gate_up") return gateUp_.get();
  if (name == "gate") return gate_.get();
  if (name == "up") return up_.get();
  if (name == "down") return down_.get();
  return nullptr;
}

std::vector<NamedTensor> Mlp::hfParameters(const std::string& prefix) const {
  std::vector<NamedTensor> out;
  if (gateUp_) {
    appendProjection(out, prefix + "gate_up_proj", *gateUp_);
  } else {
    appendProjection(out, prefix + "gate_proj", *gate_);
    appendProjection(out, prefix + "up_proj", *up_);
  }
  appendProjection(out, prefix + "down_proj", *down_);
  return out;
}

void RouterStats::add(const torch::Tensor& layerCounts, const torch::Tensor& layerProbSums, std::int64_t layerRows) {
  counts = counts.defined() ? counts + layerCounts : layerCounts;
  probSums = probSums.defined() ? probSums + layerProbSums : layerProbSums;
  rows += layerRows;
}

double routerAuxScale(const MoeConfig& moe, std::int64_t rows) {
  RP_CHECK(rows > 0, "router statistics are empty (no sparse layer ran)");
  const double r = static_cast<double>(rows);
  return moe.routerAuxLossCoef * static_cast<double>(moe.numExperts) / (r * r);
}

torch::Tensor routerAuxLoss(const RouterStats& stats, const MoeConfig& moe) {
  return (stats.counts * stats.probSums).sum() * routerAuxScale(moe, stats.rows);
}

SparseMoe::SparseMoe(const ModelConfig& c, const ParamOptions& o) : config_(c.moe) {
  const auto E = c.moe.numExperts, I = c.moe.expertIntermediateSize, H = c.hiddenSize;
  if (c.moe.kind == MoeKind::kQwen3) {
    router = register_parameter("gate", newParameter({E, H}, o));
    gateUp = register_parameter("gate_up_proj", newParameter({E, 2 * I, H}, o));
    down = register_parameter("down_proj", newParameter({E, H, I}, o));
    return;
  }
  router = register_parameter("router", newParameter({E, H}, o));
  routerBias = register_parameter("router_bias", newParameter({E}, o, 0.0));
  gateUp = register_parameter("gate_up_proj", newParameter({E, H, 2 * I}, o));
  gateUpBias = register_parameter("gate_up_proj_bias", newParameter({E, 2 * I}, o, 0.0));
  down = register_parameter("down_proj", newParameter({E, I, H}, o));
  downBias = register_parameter("down_proj_bias", newParameter({E, H}, o, 0.0));
}

void SparseMoe::attach(std::shared_ptr<ExpertLoraAdapter> gateUp, std::shared_ptr<ExpertLoraAdapter> down) {
  RP_CHECK(!gateUpLora_ && !downLora_, "experts already have LoRA adapters");
  if (gateUp) gateUpLora_ = register_module("gate_up_lora", std::move(gateUp));
  if (down) downLora_ = register_module("down_lora", std::move(down));
}

torch::Tensor SparseMoe::expert(std::int64_t e, const torch::Tensor& x) const {
  // A LoRA delta adds to the projection's output before any slicing (it adapts the fused parameter).
  auto adapted = [e](torch::Tensor y, const std::shared_ptr<ExpertLoraAdapter>& lora, const torch::Tensor& in) {
    return lora ? y + lora->delta(e, in) : y;
  };
  if (config_.kind == MoeKind::kQwen3) {
    const auto gu = adapted(torch::linear(x, gateUp[e]), gateUpLora_, x).chunk(2, -1);
    const auto h = torch::silu(gu[0]) * gu[1];
    return adapted(torch::linear(h, down[e]), downLora_, h);
  }
  // GptOssExperts: the clamped GLU on interleaved gate/up columns.
  using torch::indexing::Slice;
  const auto gu = adapted(torch::matmul(x, gateUp[e]) + gateUpBias[e], gateUpLora_, x);
  const double limit = config_.swigluLimit;
  const auto gate = gu.index({Slice(), Slice(0, torch::indexing::None, 2)}).clamp_max(limit);
  const auto up = gu.index({Slice(), Slice(1, torch::indexing::None, 2)}).clamp(-limit, limit);
  const auto glu = gate * torch::sigmoid(gate * config_.swigluAlpha);
  const auto h = (up + 1) * glu;
  return adapted(torch::matmul(h, down[e]) + downBias[e], downLora_, h);
}

torch::Tensor SparseMoe::forward(const torch::Tensor& x, RouterStats* stats, ExpertChoice* choice) const {
  const auto E = router.size(0), H = x.size(-1), topK = config_.expertsPerToken;
  const auto flat = x.reshape({-1, H});
  const auto rows = flat.size(0);
  const auto logits = torch::linear(flat, router, routerBias);
  // The probabilities the load-balancing loss uses: softmax over every expert, in float32.
  const auto probs = torch::softmax(logits, -1, torch::kFloat);
  const bool replay = choice != nullptr && choice->experts.defined();
  torch::Tensor topWeights, topExperts;
  if (replay) {
    RP_CHECK(choice->experts.sizes() == (std::vector<std::int64_t>{rows, topK}) && choice->counts.numel() == E,
             "a replayed expert choice of [{}] for {} tokens x top {}", fmt::join(choice->experts.sizes(), ", "), rows,
             topK);
    topExperts = choice->experts.to(x.device());
  }
  if (config_.kind == MoeKind::kQwen3) {
    // Qwen3MoeTopKRouter: top-k of the probabilities, optionally renormalised.
    if (replay) {
      topWeights = probs.gather(-1, topExperts);
    } else {
      std::tie(topWeights, topExperts) = probs.topk(topK, -1);
    }
    if (config_.normTopkProb) topWeights = topWeights / topWeights.sum(-1, /*keepdim=*/true);
  } else {
    // GptOssTopKRouter: top-k of the logits, softmax over the k.
    torch::Tensor topLogits;
    if (replay) {
      topLogits = logits.gather(-1, topExperts);
    } else {
      std::tie(topLogits, topExperts) = logits.topk(topK, -1);
    }
    topWeights = torch::softmax(topLogits, -1);
  }
  // Group the (token, slot) pairs by expert: a stable sort keeps each expert's tokens in token order.
  const auto flatExperts = topExperts.reshape({-1});
  const auto order = flatExperts.argsort(/*stable=*/true);
  const auto tokenOf = order.div(topK, "floor");
  // The tokens per expert, on the host to slice the groups: read back from the device, or replayed.
  const auto perExpert = replay ? choice->counts : torch::bincount(flatExperts, {}, E).to(torch::kCPU);
  if (choice != nullptr && !replay) {
    choice->experts = topExperts;
    choice->counts = perExpert;
  }
  const auto* n = perExpert.data_ptr<std::int64_t>();
  const auto grouped = flat.index_select(0, tokenOf);
  std::vector<torch::Tensor> outputs;
  std::int64_t offset = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    if (n[e] == 0) continue;
    outputs.push_back(expert(e, grouped.narrow(0, offset, n[e])));
    offset += n[e];
  }
  const auto weights = topWeights.to(logits.scalar_type()).reshape({-1}).index_select(0, order).unsqueeze(1);
  const auto out = torch::zeros_like(flat).index_add(0, tokenOf, torch::cat(outputs) * weights);
  if (stats != nullptr) stats->add(perExpert.to(x.device()).to(torch::kFloat), probs.sum(0), rows);
  return out.view(x.sizes());
}

std::vector<NamedTensor> SparseMoe::hfParameters(const std::string& prefix) const {
  if (config_.kind == MoeKind::kQwen3) {
    return {{prefix + "gate.weight", router},
            {prefix + "experts.gate_up_proj", gateUp},
            {prefix + "experts.down_proj", down}};
  }
  return {{prefix + "router.weight", router},        {prefix + "router.bias", routerBias},
          {prefix + "experts.gate_up_proj", gateUp}, {prefix + "experts.gate_up_proj_bias", gateUpBias},
          {prefix + "experts.down_proj", down},      {prefix + "experts.down_proj_bias", downBias}};
}

DecoderLayer::DecoderLayer(const ModelConfig& c, std::int64_t index, const ParamOptions& o)
    : index_(index), residualMultiplier_(c.residualMultiplier) {
  const auto norm = [&](const char* name) {
    return register_module(name, std::make_shared<RmsNorm>(c.hiddenSize, c.rmsNormEps, o, c.normStyle));
  };
  if (c.normPlacement != NormPlacement::kPost) preAttentionNorm_ = norm("input_layernorm");
  if (c.linear(index)) {
    linear_ = register_module("linear_attn", std::make_shared<GatedDeltaNet>(c, o));
  } else {
    attention_ = register_module("self_attn", std::make_shared<Attention>(c, c.sliding(index), o));
  }
  switch (c.normPlacement) {
    case NormPlacement::kPre:
      preMlpNorm_ = norm("post_attention_layernorm");  // Llama's name for the MLP's pre-norm
      break;
    case NormPlacement::kSandwich: {
      const bool glm = c.arch == Architecture::kGlm4;
      postAttentionName_ = glm ? "post_self_attn_layernorm" : "post_attention_layernorm";
      preMlpName_ = glm ? "post_attention_layernorm" : "pre_feedforward_layernorm";
      postMlpName_ = glm ? "post_mlp_layernorm" : "post_feedforward_layernorm";
      postAttentionNorm_ = norm(postAttentionName_.c_str());
      preMlpNorm_ = norm(preMlpName_.c_str());
      postMlpNorm_ = norm(postMlpName_.c_str());
      break;
    }
    case NormPlacement::kPost:
      postAttentionName_ = "post_attention_layernorm";
      postMlpName_ = "post_feedforward_layernorm";
      postAttentionNorm_ = norm(postAttentionName_.c_str());
      postMlpNorm_ = norm(postMlpName_.c_str());
      break;
  }
  if (c.moe.sparse(index)) {
    moe_ = register_module("mlp", std::make_shared<SparseMoe>(c, o));
  } else {
    mlp_ = register_module("mlp", std::make_shared<Mlp>(c, o));
  }
}

torch::Tensor DecoderLayer::forward(const torch::Tensor& hidden, const AttentionContext& ctx, RouterStats* router,
                                    ExpertChoice* choice) const {
  // Granite scales each sublayer's output before the add (residual + out * multiplier, as transformers does).
  const auto scaled = [&](const torch::Tensor& out) {
    return residualMultiplier_ == 1.0 ? out : out * residualMultiplier_;
  };
  const auto normedIn = preAttentionNorm_ ? preAttentionNorm_->forward(hidden) : hidden;
  auto attended = linear_ ? linear_->forward(normedIn, ctx.documents) : attention_->forward(normedIn, ctx);
  if (postAttentionNorm_) attended = postAttentionNorm_->forward(attended);
  const auto h = hidden + scaled(attended);
  const auto normed = preMlpNorm_ ? preMlpNorm_->forward(h) : h;
  auto mlp = moe_ ? moe_->forward(normed, router, choice) : mlp_->forward(normed);
  if (postMlpNorm_) mlp = postMlpNorm_->forward(mlp);
  return h + scaled(mlp);
}

std::vector<NamedTensor> DecoderLayer::hfParameters() const {
  const std::string prefix = fmt::format("model.layers.{}.", index_);
  std::vector<NamedTensor> out;
  if (preAttentionNorm_) out.emplace_back(prefix + "input_layernorm.weight", preAttentionNorm_->weight);
  for (auto& p :
       linear_ ? linear_->hfParameters(prefix + "linear_attn.") : attention_->hfParameters(prefix + "self_attn.")) {
    out.push_back(std::move(p));
  }
  if (postAttentionNorm_) {
    out.emplace_back(prefix + postAttentionName_ + ".weight", postAttentionNorm_->weight);
    if (preMlpNorm_) out.emplace_back(prefix + preMlpName_ + ".weight", preMlpNorm_->weight);
    out.emplace_back(prefix + postMlpName_ + ".weight", postMlpNorm_->weight);
  } else {
    out.emplace_back(prefix + "post_attention_layernorm.weight", preMlpNorm_->weight);
  }
  for (auto& p : moe_ ? moe_->hfParameters(prefix + "mlp.") : mlp_->hfParameters(prefix + "mlp.")) {
    out.push_back(std::move(p));
  }
  return out;
}

Projection* DecoderLayer::projection(const std::string& target) const {
  if (auto* p = attention_ ? attention_->projection(target) : nullptr) return p;
  if (auto* p = linear_ ? linear_->projection(target) : nullptr) return p;
  return mlp_ ? mlp_->projection(target) : nullptr;
}

std::string DecoderLayer::projectionPath(const std::string& target) const {
  if (linear_ && linear_->projection(target) != nullptr)
    return fmt::format("model.layers.{}.linear_attn.{}", index_, target);
  const bool attention = attention_ && attention_->projection(target) != nullptr;
  return fmt::format("model.layers.{}.{}.{}_proj", index_, attention ? "self_attn" : "mlp", target);
}

namespace {
// transformers' embed_scale.to(weight.dtype): Gemma's sqrt(hidden) as float32, then rounded to the model dtype.
double embeddingMultiplier(const ModelConfig& c, torch::ScalarType dtype) {
  if (!c.embeddingMultiplierInModelDtype) return c.embeddingMultiplier;
  return torch::scalar_tensor(c.embeddingMultiplier, torch::kFloat).to(dtype).item<double>();
}
}  // namespace

Embedding::Embedding(const ModelConfig& c, const ParamOptions& o)
    : multiplier_(embeddingMultiplier(c, o.dtype)), paddingIdx_(c.padTokenId) {
  weight = register_parameter("weight", newParameter({c.vocabSize, c.hiddenSize}, o));
}

torch::Tensor Embedding::forward(const torch::Tensor& inputIds) const {
  const auto embedded = torch::embedding(weight, inputIds, paddingIdx_);
  return multiplier_ == 1.0 ? embedded : embedded * multiplier_;
}

std::vector<NamedTensor> Embedding::hfParameters() const {
  return {{"model.embed_tokens.weight", weight}};
}

Head::Head(const ModelConfig& c, const Embedding& embedding, const ParamOptions& o)
    : tied_(c.tieWordEmbeddings), logitsScaling_(c.logitsScaling), softcap_(c.finalLogitSoftcap) {
  norm_ = register_module("norm", std::make_shared<RmsNorm>(c.hiddenSize, c.rmsNormEps, o, c.normStyle));
  if (tied_) {
    weight_ = embedding.weight;  // shared storage and autograd leaf: gradients from both uses add up
  } else {
    weight_ = register_parameter("lm_head", newParameter({c.vocabSize, c.hiddenSize}, o));
  }
}

torch::Tensor Head::logits(const torch::Tensor& hidden) const {
  auto logits = torch::linear(norm_->forward(hidden), weight_);
  if (logitsScaling_ != 1.0) logits = logits / logitsScaling_;
  return softcap_ > 0 ? torch::tanh(logits / softcap_) * softcap_ : logits;
}

// Note [Nothing read back per microbatch]
// What a pipeline job computes for one microbatch of a dense model (embedding, decoder layers, head and loss, their
// backward) only enqueues work on the device. Reading a device value on the host (`item()`, a copy to the CPU) or
// an op whose output size depends on values (nonzero, a boolean mask's indexing, unique) makes the host wait for
// everything queued before it, and the GPU drains while the host issues the rest. The host-side facts a microbatch
// needs (documents' offsets, targets counted) come from the batch before it goes to the device (Rotary::context,
// PackedRow::targetCount), and the loss sums are read once per job (engine/job_executor.cpp, writeLosses). Tested
// on the CPU by the ops the path calls (test_model_layers.cpp, NothingIsReadBackFromTheDevice) and on a GPU with
// LibTorch's synchronisation check set to fail (test_gpu_attention.cpp). MoE routing reads each sparse layer's
// expert counts (it sizes the experts' batches from them): sparse layers are outside this rule.
LossSum Head::loss(const torch::Tensor& hidden, const torch::Tensor& targets, std::int64_t chunkTokens) const {
  const auto flatHidden = hidden.reshape({-1, hidden.size(-1)});
  const auto flatTargets = targets.reshape({-1});
  const auto rows = flatHidden.size(0);
  const auto chunk = chunkTokens > 0 ? chunkTokens : autoChunkRows(rows, weight_.size(1), weight_.size(0));
  LossSum out;
  out.sum = linearCrossEntropy(norm_->forward(flatHidden), weight_, flatTargets, chunk, kIgnoreIndex,
                               {.divisor = logitsScaling_, .softcap = softcap_});
  return out;
}

std::vector<NamedTensor> Head::hfParameters() const {
  std::vector<NamedTensor> out{{"model.norm.weight", norm_->weight}};
  if (!tied_) out.emplace_back("lm_head.weight", weight_);
  return out;
}

}  // namespace rp::model
