// LoRA adapters (Hu et al.) as PEFT defines them: delta(x) = B(A(dropout(x))) * alpha / r, with A [r, in]
// Kaiming-uniform(a = sqrt(5)) and B [out, r] zeros, so a fresh adapter changes nothing. On a mixture-of-experts
// model the attention projections take these, and the stacked expert parameters take PEFT's target_parameters
// adapters (ExpertLoraAdapter); docs/moe.md, "LoRA".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "model/layers.h"

namespace rp::model {

// Qwen3.5's linear-attention modules, which lora.targets names as they are ("in_proj_qkv", "in_proj_z",
// "in_proj_b", "in_proj_a", "out_proj").
bool isLinearAttentionTarget(const std::string& target);

struct LoraConfig {
  std::int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> targets{"q", "k", "v", "o", "gate", "up", "down"};
};

class LoraAdapter : public torch::nn::Module {
 public:
  // Initialised (reset()) when `options` allocate.
  LoraAdapter(std::int64_t in, std::int64_t out, const LoraConfig& config, const ParamOptions& options);
  torch::Tensor delta(const torch::Tensor& x);
  // A from Kaiming-uniform drawn in float32 (then rounded to the adapter's dtype), B zeros.
  void reset();
  torch::Tensor a;  // [r, in]
  torch::Tensor b;  // [out, r]

 private:
  double scaling_;
  double dropout_;
};

// LoRA on a stack of E experts' maps, as PEFT adapts one 3-D parameter (target_parameters, its ParamWrapper):
// A [r·E, in] holds the experts one after another (A_e = A.view(E, r, in)[e]), B [out, r·E] interleaves them
// (B_e = B.view(out, r, E)[:, :, e]), and expert e's map gains B_e A_e * alpha / r. Initialised as LoraAdapter
// (Kaiming over `in`, B zeros); no dropout (PEFT refuses it on parameters).
class ExpertLoraAdapter : public torch::nn::Module {
 public:
  ExpertLoraAdapter(std::int64_t experts, std::int64_t in, std::int64_t out, const LoraConfig& config,
                    const ParamOptions& options);
  // Expert e's delta on its tokens x [n, in]: [n, out].
  torch::Tensor delta(std::int64_t e, const torch::Tensor& x) const;
  void reset();
  torch::Tensor a;  // [r·E, in]
  torch::Tensor b;  // [out, r·E]

 private:
  std::int64_t experts_;
  double scaling_;
};

// The stacked weight an expert adapter adds, B_e A_e * scaling for each e: [E, out, in], or [E, in, out] when
// `transposed` (GPT-OSS stores its experts input-major). What a merge adds to the stacked parameter.
torch::Tensor expertDeltaWeight(const torch::Tensor& a, const torch::Tensor& b, std::int64_t rank, double scaling,
                                bool transposed);

// The expert parameters `lora.targets` adapt on a mixture-of-experts model: gate and up together adapt the
// fused gate_up_proj (one adapter, as PEFT can only adapt the whole parameter), down the down_proj.
struct ExpertTargets {
  bool gateUp = false;
  bool down = false;
};
// Throws InputError when only one of gate and up is named.
ExpertTargets expertTargets(const std::vector<std::string>& targets);
// The PEFT module path of an expert adapter under "model.layers.3.mlp.experts": with both parameters adapted
// PEFT nests its wrappers, gate_up_proj's inside (".base_layer"); and back, the stacked parameter
// ("....experts.gate_up_proj") an adapter's module path adapts.
std::string expertAdapterPath(const std::string& experts, bool gateUp, const ExpertTargets& targets);
std::string expertParameterOf(const std::string& adapterPath, const ExpertTargets& targets);

class CausalLM;

// Attaches adapters to the targeted projections of every decoder layer (initialised from LibTorch's RNG,
// which the caller seeds; placeholders on an unallocated model), freezes every base parameter and returns the
// adapter parameters under PEFT's names ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
// in layer order.
std::vector<NamedTensor> attachLora(CausalLM& model, const LoraConfig& config);
// Initialises the adapters attachLora(model, config) attached again, in its order (so from the same RNG state,
// the same values).
void resetLora(CausalLM& model, const LoraConfig& config);

}  // namespace rp::model
