// The model as a layer list (docs/architecture.md, "Model"): a prefix (token embedding), N decoder layers,
// and a postfix (final norm + LM head + loss). Each layer runs on its own, which is what the pipeline
// schedules: a stage is a contiguous run of layers. Layers take the per-microbatch AttentionContext.
// Thread-safety: a layer may be used by one thread at a time (LibTorch autograd state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "model/attention.h"
#include "model/config.h"
#include "model/nf4.h"

namespace rp::model {

// A parameter under its Hugging Face name (e.g. "model.layers.3.self_attn.q_proj.weight").
using NamedTensor = std::pair<std::string, torch::Tensor>;

// One microbatch as the layers see it. All tensors are [B, T] int64.
struct Batch {
  torch::Tensor inputIds;
  torch::Tensor positionIds;  // restart at 0 for each packed document
  torch::Tensor segmentIds;   // undefined, or a document index per token: attention stays inside a document
  torch::Tensor targets;      // token to predict at each position; kIgnoreIndex = no loss
};
inline constexpr std::int64_t kIgnoreIndex = -100;

// Plain causal-LM batch: positions 0..T-1, targets = inputs shifted left, last position ignored.
Batch causalBatch(const torch::Tensor& inputIds);

// Per-microbatch attention inputs shared by every decoder layer.
struct AttentionContext {
  torch::Tensor cos;        // [B, T, head_dim]
  torch::Tensor sin;        // [B, T, head_dim]
  torch::Tensor slidingCos, slidingSin;  // the sliding layers' where their RoPE differs (Gemma 3), else undefined
  Documents documents;      // where the packed documents lie: attention stays inside each (no [T, T] mask)
  std::int64_t window = 0;  // models with sliding-window layers: their window; 0 = none
};

// How a model's parameters are created: allocated in `dtype` (uninitialised; norms start at one, biases at
// zero), or, unallocated, as placeholders of the right shape and dtype over one element of storage, which the
// caller binds to real memory (Tensor::set_data) before use — the pipeline's workers hold no model of their
// own, only the stages they run (engine/stage_slots.h).
// With `nf4Base` the frozen linear weights of attention and the dense MLP (model::nf4Linear) are stored
// packed NF4 instead (model/nf4.h, Note [Packed NF4]; lora.base_dtype = "nf4").
struct ParamOptions {
  torch::ScalarType dtype = torch::kFloat;
  bool allocate = true;
  bool nf4Base = false;
  bool doubleQuant = false;  // nf4Base: the block scales double-quantised
  // Where a placeholder (allocate = false) lives: the CPU, or the meta device for a model whose stages compute on
  // shapes alone (the emulated device, docs/emulated.md), which binds them to meta tensors.
  torch::Device placeholderDevice = torch::kCPU;
};
// A parameter tensor of `sizes` under `options`, filled with `fill` when allocated and a fill is given.
torch::Tensor newParameter(at::IntArrayRef sizes, const ParamOptions& options, std::optional<double> fill = {});

// Rotary position embedding frequencies (default, linear, llama3 and yarn scaling as transformers computes
// them) and the documents and window of a microbatch.
class Rotary {
 public:
  explicit Rotary(const ModelConfig& config);
  AttentionContext context(const Batch& batch, torch::ScalarType dtype) const;

 private:
  std::pair<torch::Tensor, torch::Tensor> cosSin(const torch::Tensor& positions, const torch::Tensor& invFreq,
                                                 double scaling, torch::ScalarType dtype) const;

  bool float32_;                  // cos and sin kept in float32 (OLMo 2), else in the model dtype
  bool interleaved_;              // GLM-4: cos and sin for interleaved pairs
  torch::Tensor invFreq_;         // [rotary dims / 2] float32
  torch::Tensor longInvFreq_;     // longrope: past originalMaxPositions_ (invFreq_ up to it)
  torch::Tensor slidingInvFreq_;  // Gemma 3: the sliding layers' (ModelConfig::slidingRope)
  std::int64_t originalMaxPositions_ = 0;
  double scaling_;         // yarn's and longrope's attention factor on cos and sin
  double slidingScaling_;  // the same for slidingInvFreq_
  std::int64_t window_;    // sliding window of the sliding layers; 0 = none
};

// RMSNorm as transformers computes it in each NormStyle (model/config.h).
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(std::int64_t dim, double eps, const ParamOptions& options, NormStyle style = NormStyle::kLlama);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight;

 private:
  double eps_;
  NormStyle style_;
};

class LoraAdapter;
class ExpertLoraAdapter;
class GatedDeltaNet;

// y = x W^T (+ b) (+ LoRA delta); weights stored as [out, in] like nn.Linear, or, with options.nf4Base,
// `weight` is the packed NF4 buffer (uint8, a buffer rather than a parameter: it never trains) of `packing`.
class Projection : public torch::nn::Module {
 public:
  Projection(std::int64_t in, std::int64_t out, bool bias, const ParamOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;
  std::int64_t inFeatures() const { return in_; }
  std::int64_t outFeatures() const { return out_; }
  // Attaches a LoRA adapter (model/lora.h); at most one.
  void attach(std::shared_ptr<LoraAdapter> adapter);
  const std::shared_ptr<LoraAdapter>& adapter() const { return lora_; }
  const std::optional<Nf4Packing>& packing() const { return packing_; }
  torch::Tensor weight;
  torch::Tensor bias;

 private:
  std::int64_t in_, out_;
  std::optional<Nf4Packing> packing_;
  std::shared_ptr<LoraAdapter> lora_;
};

// Grouped-query attention within each packed document (model/attention.h). GPT-OSS: on sliding layers keys
// come from the last `sliding_window` positions (AttentionContext::window), and each head's softmax also
// normalises over a learned sink logit, which attends to nothing (computed eagerly per document, as
// transformers' eager_attention_forward).
class Attention : public torch::nn::Module {
 public:
  Attention(const ModelConfig& config, bool sliding, const ParamOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& ctx) const;
  std::vector<NamedTensor> hfParameters(const std::string& prefix) const;
  // "q", "k", "v", "o" ("qkv" and "o" where they are fused: Phi-3); nullptr for other names.
  Projection* projection(const std::string& name) const;

 private:
  std::int64_t numHeads_, numKvHeads_, headDim_;
  std::shared_ptr<Projection> qkv_;  // Phi-3: q, k and v as one projection, their rows in that order
  double scale_;    // of the scores: 1 / sqrt(headDim), Granite's attention_multiplier, Gemma's scalar^-0.5
  double softcap_;  // of the scores (Gemma 2); 0 none
  bool sliding_;
  bool gated_;  // Qwen3.5: q_proj yields [query, gate] per head; the output times sigmoid(gate)
  std::shared_ptr<Projection> q_, k_, v_, o_;
  std::shared_ptr<RmsNorm> qNorm_, kNorm_;  // Qwen3: per head; OLMo 2: over the whole projections
  bool qkNormFullWidth_;
  bool interleaved_;                        // GLM-4's RoPE on interleaved pairs
  torch::Tensor sinks_;                     // GPT-OSS: [heads]
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(const ModelConfig& config, const ParamOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;
  std::vector<NamedTensor> hfParameters(const std::string& prefix) const;
  // "gate", "up", "down" ("gate_up" and "down" where they are fused: Phi-3); nullptr for other names.
  Projection* projection(const std::string& name) const;

 private:
  std::shared_ptr<Projection> gate_, up_, down_;
  std::shared_ptr<Projection> gateUp_;  // Phi-3: gate's rows then up's
  Activation activation_;
};

// What the routers of one forward pass saw, summed over its sparse layers: the inputs of transformers'
// load_balancing_loss_func, kept as sums so layers (and pipeline stages) add up in any grouping.
struct RouterStats {
  torch::Tensor counts;    // [E] float32: top-k assignments per expert (no gradient)
  torch::Tensor probSums;  // [E] float32: routing probabilities summed over rows (differentiable)
  std::int64_t rows = 0;   // tokens x sparse layers
  void add(const torch::Tensor& layerCounts, const torch::Tensor& layerProbSums, std::int64_t layerRows);
};

// The experts a sparse layer chose for each token of one forward pass. A pipeline records it in the forward
// and hands it back to the recompute (engine/routing_tape.h), which then routes identically whatever the
// arithmetic of the second pass (GPU reductions, ties) and slices the experts' tokens without reading the
// counts back from the device.
struct ExpertChoice {
  torch::Tensor experts;  // [tokens, k] int64; defined on entry: replayed instead of chosen
  torch::Tensor counts;   // [E] int64 on the CPU: tokens routed to each expert
};

// The load-balancing loss as transformers computes it, times router_aux_loss_coef:
// coef * E * sum_e (counts_e / rows) * (probSums_e / rows) = routerAuxScale * sum_e counts_e * probSums_e.
// A float32 scalar.
torch::Tensor routerAuxLoss(const RouterStats& stats, const MoeConfig& moe);
double routerAuxScale(const MoeConfig& moe, std::int64_t rows);

// A sparse block (MoeConfig::kind): a top-k router and experts, stored stacked as transformers 5 holds them
// in memory. Qwen3-MoE: router `gate` [E, H], gate_up_proj [E, 2I, H] (gate over up), down_proj [E, H, I];
// model/expert_layout.h converts to and from the per-expert tensors of published checkpoints. GPT-OSS:
// router `router` [E, H] with a bias, gate_up_proj [E, H, 2I] (gate and up interleaved by column),
// down_proj [E, I, H], each with a bias — the layout of its published checkpoints. Tokens are grouped by
// expert, one matrix product per projection per expert that has any.
class SparseMoe : public torch::nn::Module {
 public:
  SparseMoe(const ModelConfig& config, const ParamOptions& options);
  // `stats`, when given, receives this layer's router statistics; `choice`, when given, is filled with the
  // experts chosen, or, when it holds them already, replayed (the routing weights still come from this pass's
  // router, so its gradient is unchanged).
  torch::Tensor forward(const torch::Tensor& x, RouterStats* stats, ExpertChoice* choice = nullptr) const;
  std::vector<NamedTensor> hfParameters(const std::string& prefix) const;
  // Attaches LoRA adapters (model/lora.h) to gate_up_proj and down_proj; either may be null; at most once.
  void attach(std::shared_ptr<ExpertLoraAdapter> gateUp, std::shared_ptr<ExpertLoraAdapter> down);
  const std::shared_ptr<ExpertLoraAdapter>& gateUpAdapter() const { return gateUpLora_; }
  const std::shared_ptr<ExpertLoraAdapter>& downAdapter() const { return downLora_; }
  torch::Tensor router;  // [E, H]
  torch::Tensor gateUp;
  torch::Tensor down;
  torch::Tensor routerBias, gateUpBias, downBias;  // GPT-OSS: [E], [E, 2I], [E, H]

 private:
  // One expert on its tokens `x` [n, H].
  torch::Tensor expert(std::int64_t e, const torch::Tensor& x) const;

  MoeConfig config_;
  std::shared_ptr<ExpertLoraAdapter> gateUpLora_, downLora_;
};

class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const ModelConfig& config, std::int64_t index, const ParamOptions& options);
  // `router` collects a sparse layer's router statistics (routerAuxLoss), `choice` records or replays its
  // routing (SparseMoe::forward); dense layers ignore both.
  torch::Tensor forward(const torch::Tensor& hidden, const AttentionContext& ctx, RouterStats* router = nullptr,
                        ExpertChoice* choice = nullptr) const;
  bool sparse() const { return moe_ != nullptr; }
  // The sparse block of a sparse layer; nullptr for dense ones.
  SparseMoe* experts() const { return moe_.get(); }
  std::vector<NamedTensor> hfParameters() const;
  std::int64_t index() const { return index_; }
  // The projection a LoRA target names ("q", "k", "v", "o", "gate", "up", "down"; on Qwen3.5's linear-attention
  // layers "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj") and its HF module path
  // ("model.layers.3.self_attn.q_proj", "model.layers.0.linear_attn.in_proj_qkv"); nullptr for unknown names,
  // for the MLP targets of a sparse layer, for the attention targets of a linear-attention layer (hasAttention()
  // false), which has none, and for the linear-attention targets elsewhere.
  bool hasAttention() const { return attention_ != nullptr; }
  Projection* projection(const std::string& target) const;
  std::string projectionPath(const std::string& target) const;

 private:
  std::int64_t index_;
  double residualMultiplier_;  // Granite's; 1 elsewhere
  // Before and after each sublayer (nullptr: none): Llama's input_layernorm and post_attention_layernorm (the
  // MLP's pre-norm); Gemma's input_layernorm, post_attention_layernorm (on attention's output),
  // pre_feedforward_layernorm and post_feedforward_layernorm.
  std::shared_ptr<RmsNorm> preAttentionNorm_, postAttentionNorm_, preMlpNorm_, postMlpNorm_;
  std::string postAttentionName_, preMlpName_, postMlpName_;  // their HF names (GLM-4's differ from Gemma's)
  std::shared_ptr<Attention> attention_;                      // or, on Qwen3.5's linear-attention layers:
  std::shared_ptr<GatedDeltaNet> linear_;                     // model/linear_attention.h
  std::shared_ptr<Mlp> mlp_;        // dense layers
  std::shared_ptr<SparseMoe> moe_;  // sparse layers
};

// Prefix layer: token ids -> hidden states.
class Embedding : public torch::nn::Module {
 public:
  Embedding(const ModelConfig& config, const ParamOptions& options);
  torch::Tensor forward(const torch::Tensor& inputIds) const;
  std::vector<NamedTensor> hfParameters() const;
  torch::Tensor weight;  // [vocab, hidden]

 private:
  double multiplier_;        // Granite's embedding_multiplier, Gemma's sqrt(hidden); 1 elsewhere
  std::int64_t paddingIdx_;  // ModelConfig::padTokenId: its row gets no gradient from the lookup; -1 none
};

// Summed token loss, so microbatches accumulate exactly. The tokens it covers are the batch's targets, which the
// caller counts on the host (PackedRow::targetCount): counted here, they would be read back from the device, a wait
// for the GPU in every microbatch (Note [Nothing read back per microbatch], model/layers.cpp).
struct LossSum {
  torch::Tensor sum;  // scalar float32, on the hidden states' device
  torch::Tensor aux;  // MoE with the load-balancing loss: coef x that loss of this forward (routerAuxLoss)
};

// Postfix layer: final norm, LM head, cross-entropy. With tied embeddings the head's weight is the
// embedding's tensor and hfParameters() leaves it to the Embedding (its owner).
class Head : public torch::nn::Module {
 public:
  Head(const ModelConfig& config, const Embedding& embedding, const ParamOptions& options);
  torch::Tensor logits(const torch::Tensor& hidden) const;  // [B, T, vocab] in the model dtype
  // Cross-entropy in float32 over positions with a target, streamed `chunkTokens` rows at a time
  // (model/linear_cross_entropy.h: at most one chunk of logits exists, in the forward and the backward);
  // 0 = auto (a chunk's logits about the size of the hidden states).
  LossSum loss(const torch::Tensor& hidden, const torch::Tensor& targets, std::int64_t chunkTokens = 0) const;
  std::vector<NamedTensor> hfParameters() const;

 private:
  bool tied_;
  double logitsScaling_;  // the logits are divided by it (Granite's; 1 elsewhere)
  double softcap_;        // and soft-capped (Gemma 2's final_logit_softcapping; 0 none)
  std::shared_ptr<RmsNorm> norm_;
  torch::Tensor weight_;  // [vocab, hidden]
};

}  // namespace rp::model
