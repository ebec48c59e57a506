#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/log.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"

namespace rp::model {
namespace {

// PEFT's initialisation: A Kaiming-uniform(a = sqrt(5)) over its input features, drawn in float32 and rounded
// to the adapter's dtype; B zeros.
void resetFactors(torch::Tensor& a, torch::Tensor& b) {
  torch::NoGradGuard noGrad;
  torch::Tensor a32 = torch::empty(a.sizes(), torch::kFloat);
  torch::nn::init::kaiming_uniform_(a32, std::sqrt(5.0));
  a.copy_(a32);
  b.zero_();
}

// A linear-attention layer (Qwen3.5) has no q/k/v/o: those targets adapt the full-attention layers alone, as
// PEFT's target_modules q_proj ... o_proj match only those; and the linear-attention targets (its modules'
// names, as PEFT's target_modules name them) adapt the linear-attention layers alone.
bool linearAttentionSkips(const DecoderLayer& layer, const std::string& target) {
  if (layer.hasAttention()) return isLinearAttentionTarget(target);
  return target == "q" || target == "k" || target == "v" || target == "o";
}

bool has(const std::vector<std::string>& targets, const char* name) {
  return std::find(targets.begin(), targets.end(), name) != targets.end();
}

bool mlpTarget(const std::string& target) {
  return target == "gate" || target == "up" || target == "down";
}

// What lora.targets adapts on `model`: projections by target name, and on a mixture-of-experts model the
// expert parameters (the MLP targets; the attention ones stay projections).
struct Targets {
  std::vector<std::string> projections;
  ExpertTargets experts;
};

// Fused projections (Phi-3's qkv_proj, Phi-3's and GLM-4's gate_up_proj): any of q, k, v adapts qkv_proj and any
// of gate, up adapts gate_up_proj (PEFT's target_modules for these models name them so); a subset is widened to
// the whole, said once.
std::vector<std::string> fusedTargets(const std::vector<std::string>& targets, bool qkv, bool say) {
  std::vector<std::string> out;
  const auto fuse = [&](std::initializer_list<const char*> parts, const char* fused) {
    int present = 0;
    for (const char* p : parts) present += has(targets, p) ? 1 : 0;
    if (present == 0) return;
    out.push_back(fused);
    static std::once_flag widened;
    if (say && present < static_cast<int>(parts.size())) {
      std::call_once(widened, [&] {
        RP_LOG_WARN("lora.targets: this model fuses {} into {}_proj; the adapter covers all of them, as PEFT's {}_proj",
                    fmt::join(parts, ", "), fused, fused);
      });
    }
  };
  if (qkv) fuse({"q", "k", "v"}, "qkv");
  fuse({"gate", "up"}, "gate_up");
  for (const auto& t : targets) {
    if (t == "o" || t == "down" || (!qkv && (t == "q" || t == "k" || t == "v"))) out.push_back(t);
  }
  return out;
}

Targets adaptedTargets(const CausalLM& model, const LoraConfig& config, bool say) {
  const ModelConfig& c = model.config();
  const bool linear = std::find(c.linearLayers.begin(), c.linearLayers.end(), true) != c.linearLayers.end();
  for (const auto& t : config.targets) {
    if (isLinearAttentionTarget(t) && !linear) {
      RP_THROW(InputError,
               "lora.targets contains \"{}\", a module of Qwen3.5's linear-attention layers, but this model has no "
               "linear-attention layer (docs/model.md)",
               t);
    }
  }
  if (c.fusedQkv || c.fusedGateUp) return {fusedTargets(config.targets, c.fusedQkv, say), {}};
  if (c.moe.numExperts == 0) return {config.targets, {}};
  Targets out;
  for (const auto& t : config.targets) {
    if (!mlpTarget(t)) out.projections.push_back(t);
  }
  out.experts = expertTargets(config.targets);
  const bool experts = out.experts.gateUp || out.experts.down;
  if (experts && config.dropout > 0.0) {
    RP_THROW(InputError,
             "lora.dropout = {}: the experts' adapters (lora.targets gate, up, down on a mixture-of-experts model) "
             "take no dropout, as in PEFT; set lora.dropout = 0 or adapt attention only (lora.targets = q, k, v, o)",
             config.dropout);
  }
  std::vector<std::int64_t> dense;
  for (std::int64_t l = 0; l < c.numLayers; ++l) {
    if (!c.moe.sparse(l)) dense.push_back(l);
  }
  static std::once_flag warned;  // once per process: the trainer sizes its run on a placeholder model first
  if (say && experts && !dense.empty()) {
    std::call_once(warned, [&] {
      RP_LOG_WARN(
          "lora.targets: gate, up and down adapt the experts; the MLPs of the dense layers ({}) take no "
          "adapter on a mixture-of-experts model, as in PEFT (docs/moe.md)",
          fmt::join(dense, ", "));
    });
  }
  return out;
}

}  // namespace

bool isLinearAttentionTarget(const std::string& target) {
  return target == "in_proj_qkv" || target == "in_proj_z" || target == "in_proj_b" || target == "in_proj_a" ||
         target == "out_proj";
}

LoraAdapter::LoraAdapter(std::int64_t in, std::int64_t out, const LoraConfig& config, const ParamOptions& options)
    : scaling_(config.alpha / static_cast<double>(config.rank)), dropout_(config.dropout) {
  a = register_parameter("lora_A", newParameter({config.rank, in}, options));
  b = register_parameter("lora_B", newParameter({out, config.rank}, options));
  if (options.allocate) reset();
}

void LoraAdapter::reset() {
  resetFactors(a, b);
}

torch::Tensor LoraAdapter::delta(const torch::Tensor& x) {
  const auto dropped = dropout_ > 0.0 ? torch::dropout(x, dropout_, is_training()) : x;
  return torch::linear(torch::linear(dropped, a), b) * scaling_;
}

ExpertLoraAdapter::ExpertLoraAdapter(std::int64_t experts, std::int64_t in, std::int64_t out, const LoraConfig& config,
                                     const ParamOptions& options)
    : experts_(experts), scaling_(config.alpha / static_cast<double>(config.rank)) {
  a = register_parameter("lora_A", newParameter({config.rank * experts, in}, options));
  b = register_parameter("lora_B", newParameter({out, config.rank * experts}, options));
  if (options.allocate) reset();
}

void ExpertLoraAdapter::reset() {
  resetFactors(a, b);
}

torch::Tensor ExpertLoraAdapter::delta(std::int64_t e, const torch::Tensor& x) const {
  const auto rank = a.size(0) / experts_;
  const auto ae = a.view({experts_, rank, a.size(1)})[e];            // [r, in]
  const auto be = b.view({b.size(0), rank, experts_}).select(2, e);  // [out, r]
  return torch::linear(torch::linear(x, ae), be) * scaling_;
}

torch::Tensor expertDeltaWeight(const torch::Tensor& a, const torch::Tensor& b, std::int64_t rank, double scaling,
                                bool transposed) {
  RP_CHECK(rank > 0 && a.size(0) % rank == 0 && b.size(1) == a.size(0), "expert LoRA factors [{}] and [{}], rank {}",
           fmt::join(a.sizes(), ", "), fmt::join(b.sizes(), ", "), rank);
  const auto E = a.size(0) / rank;
  const auto ae = a.view({E, rank, a.size(1)});                     // [E, r, in]
  const auto be = b.view({b.size(0), rank, E}).permute({2, 0, 1});  // [E, out, r]
  const auto delta = torch::bmm(be, ae) * scaling;                  // [E, out, in]
  return transposed ? delta.transpose(1, 2).contiguous() : delta;
}

ExpertTargets expertTargets(const std::vector<std::string>& targets) {
  const bool gate = has(targets, "gate"), up = has(targets, "up");
  if (gate != up) {
    RP_THROW(InputError,
             "lora.targets [{}]: on a mixture-of-experts model gate and up adapt the experts' fused gate_up_proj "
             "together (as PEFT adapts the whole parameter); name both or neither",
             fmt::join(targets, ", "));
  }
  return {gate && up, has(targets, "down")};
}

std::string expertAdapterPath(const std::string& experts, bool gateUp, const ExpertTargets& targets) {
  return gateUp && targets.down ? experts + ".base_layer" : experts;
}

std::string expertParameterOf(const std::string& adapterPath, const ExpertTargets& targets) {
  const std::string inner = ".base_layer";
  if (adapterPath.ends_with(inner)) {
    return adapterPath.substr(0, adapterPath.size() - inner.size()) + ".gate_up_proj";
  }
  return adapterPath + (targets.down ? ".down_proj" : ".gate_up_proj");
}

std::vector<NamedTensor> attachLora(CausalLM& model, const LoraConfig& config) {
  if (config.rank < 1) RP_THROW(InputError, "lora.rank must be >= 1 to attach adapters, got {}", config.rank);
  for (auto& param : model.parameters()) param.set_requires_grad(false);
  std::vector<NamedTensor> out;
  auto named = [&out](const std::string& path, const torch::Tensor& a, const torch::Tensor& b) {
    out.emplace_back("base_model.model." + path + ".lora_A.weight", a);
    out.emplace_back("base_model.model." + path + ".lora_B.weight", b);
  };
  const Targets targets = adaptedTargets(model, config, /*say=*/true);
  const ModelConfig& c = model.config();
  ParamOptions options{model.dtype(), model.allocated()};
  options.placeholderDevice = model.placeholderDevice();
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) {
    DecoderLayer& layer = model.decoderLayer(i);
    for (const auto& target : targets.projections) {
      Projection* projection = layer.projection(target);
      if (projection == nullptr && linearAttentionSkips(layer, target)) continue;
      if (projection == nullptr) RP_THROW(InputError, "lora.targets: unknown projection \"{}\"", target);
      auto adapter =
          std::make_shared<LoraAdapter>(projection->inFeatures(), projection->outFeatures(), config, options);
      projection->attach(adapter);
      named(layer.projectionPath(target), adapter->a, adapter->b);
    }
    SparseMoe* experts = layer.experts();
    if (experts == nullptr) continue;
    const auto E = c.moe.numExperts, H = c.hiddenSize, I = c.moe.expertIntermediateSize;
    std::shared_ptr<ExpertLoraAdapter> gateUp, down;
    if (targets.experts.gateUp) gateUp = std::make_shared<ExpertLoraAdapter>(E, H, 2 * I, config, options);
    if (targets.experts.down) down = std::make_shared<ExpertLoraAdapter>(E, I, H, config, options);
    experts->attach(gateUp, down);
    const std::string path = fmt::format("model.layers.{}.mlp.experts", i);
    if (gateUp) named(expertAdapterPath(path, true, targets.experts), gateUp->a, gateUp->b);
    if (down) named(expertAdapterPath(path, false, targets.experts), down->a, down->b);
  }
  return out;
}

void resetLora(CausalLM& model, const LoraConfig& config) {
  const Targets targets = adaptedTargets(model, config, /*say=*/false);
  for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) {
    DecoderLayer& layer = model.decoderLayer(i);
    for (const auto& target : targets.projections) {
      Projection* projection = layer.projection(target);
      if (projection == nullptr && linearAttentionSkips(layer, target)) continue;
      RP_CHECK(projection != nullptr && projection->adapter(), "no LoRA adapter on layer {} {}", i, target);
      projection->adapter()->reset();
    }
    if (SparseMoe* experts = layer.experts()) {
      if (targets.experts.gateUp) experts->gateUpAdapter()->reset();
      if (targets.experts.down) experts->downAdapter()->reset();
    }
  }
}

}  // namespace rp::model
