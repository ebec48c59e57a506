// LoRA adapters (Hu et al.) as PEFT defines them: delta(x) = B(A(dropout(x))) * alpha / r, with A [r, in]
// Kaiming-uniform(a = sqrt(5)) and B [out, r] zeros, so a fresh adapter changes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "model/layers.h"

namespace rp::model {

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
