#include "model/lora.h"

#include <cmath>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "model/causal_lm.h"

namespace rp::model {

LoraAdapter::LoraAdapter(std::int64_t in, std::int64_t out, const LoraConfig& config, const ParamOptions& options)
    : scaling_(config.alpha / static_cast<double>(config.rank)), dropout_(config.dropout) {
  a = register_parameter("lora_A", newParameter({config.rank, in}, options));
  b = register_parameter("lora_B", newParameter({out, config.rank}, options));
  if (options.allocate) reset();
}

void LoraAdapter::reset() {
  torch::NoGradGuard noGrad;
  torch::Tensor a32 = torch::empty(a.sizes(), torch::kFloat);
  torch::nn::init::kaiming_uniform_(a32, std::sqrt(5.0));
  a.copy_(a32);
  b.zero_();
}

torch::Tensor LoraAdapter::delta(const torch::Tensor& x) {
  const auto dropped = dropout_ > 0.0 ? torch::dropout(x, dropout_, is_training()) : x;
  return torch::linear(torch::linear(dropped, a), b) * scaling_;
}

namespace {

bool mlpTarget(const std::string& target) {
  return target == "gate" || target == "up" || target == "down";
}

// The targets that get adapters. On a MoE model the MLP targets are left out: experts take no adapter yet,
// and PEFT reads gate/up/down on such a model as the experts, so even a dense layer's MLP adapter would not
// load there (docs/moe.md, "LoRA").
std::vector<std::string> adaptedTargets(const CausalLM& model, const LoraConfig& config, bool say) {
  if (model.config().moe.numExperts == 0) return config.targets;
  std::vector<std::string> kept, dropped;
  for (const auto& t : config.targets) (mlpTarget(t) ? dropped : kept).push_back(t);
  if (kept.empty()) {
    RP_THROW(InputError,
             "lora.targets [{}]: on a mixture-of-experts model only the attention projections (q, k, v, o) take "
             "LoRA adapters (docs/moe.md)",
             fmt::join(config.targets, ", "));
  }
  if (say && !dropped.empty()) {
    RP_LOG_WARN(
        "lora.targets: {} left out on this mixture-of-experts model (experts take no LoRA adapter yet; "
        "docs/moe.md); adapting {}",
        fmt::join(dropped, ", "), fmt::join(kept, ", "));
  }
  return kept;
}

}  // namespace

std::vector<NamedTensor> attachLora(CausalLM& model, const LoraConfig& config) {
  if (config.rank < 1) RP_THROW(InputError, "lora.rank must be >= 1 to attach adapters, got {}", config.rank);
  for (auto& param : model.parameters()) param.set_requires_grad(false);
  std::vector<NamedTensor> out;
  const std::vector<std::string> targets = adaptedTargets(model, config, /*say=*/true);
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) {
    DecoderLayer& layer = model.decoderLayer(i);
    for (const auto& target : targets) {
      Projection* projection = layer.projection(target);
      if (projection == nullptr) RP_THROW(InputError, "lora.targets: unknown projection \"{}\"", target);
      auto adapter = std::make_shared<LoraAdapter>(projection->inFeatures(), projection->outFeatures(), config,
                                                   ParamOptions{model.dtype(), model.allocated()});
      projection->attach(adapter);
      const std::string path = "base_model.model." + layer.projectionPath(target);
      out.emplace_back(path + ".lora_A.weight", adapter->a);
      out.emplace_back(path + ".lora_B.weight", adapter->b);
    }
  }
  return out;
}

void resetLora(CausalLM& model, const LoraConfig& config) {
  const std::vector<std::string> targets = adaptedTargets(model, config, /*say=*/false);
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) {
    DecoderLayer& layer = model.decoderLayer(i);
    for (const auto& target : targets) {
      Projection* projection = layer.projection(target);
      RP_CHECK(projection != nullptr && projection->adapter(), "no LoRA adapter on layer {} {}", i, target);
      projection->adapter()->reset();
    }
  }
}

}  // namespace rp::model
