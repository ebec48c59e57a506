#include "model/lora.h"

#include <cmath>

#include <torch/torch.h>

#include "common/error.h"
#include "model/causal_lm.h"

namespace rp::model {

LoraAdapter::LoraAdapter(std::int64_t in, std::int64_t out, const LoraConfig& config)
    : scaling_(config.alpha / static_cast<double>(config.rank)), dropout_(config.dropout) {
  a = register_parameter("lora_A", torch::empty({config.rank, in}));
  b = register_parameter("lora_B", torch::zeros({out, config.rank}));
  torch::NoGradGuard noGrad;
  torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
}

torch::Tensor LoraAdapter::delta(const torch::Tensor& x) {
  const auto dropped = dropout_ > 0.0 ? torch::dropout(x, dropout_, is_training()) : x;
  return torch::linear(torch::linear(dropped, a), b) * scaling_;
}

std::vector<NamedTensor> attachLora(CausalLM& model, const LoraConfig& config) {
  if (config.rank < 1) RP_THROW(InputError, "lora.rank must be >= 1 to attach adapters, got {}", config.rank);
  for (auto& param : model.parameters()) param.set_requires_grad(false);
  std::vector<NamedTensor> out;
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) {
    DecoderLayer& layer = model.decoderLayer(i);
    for (const auto& target : config.targets) {
      Projection* projection = layer.projection(target);
      if (projection == nullptr) RP_THROW(InputError, "lora.targets: unknown projection \"{}\"", target);
      auto adapter = std::make_shared<LoraAdapter>(projection->inFeatures(), projection->outFeatures(), config);
      adapter->to(model.dtype());
      projection->attach(adapter);
      const std::string path = "base_model.model." + layer.projectionPath(target);
      out.emplace_back(path + ".lora_A.weight", adapter->a);
      out.emplace_back(path + ".lora_B.weight", adapter->b);
    }
  }
  return out;
}

}  // namespace rp::model
