#include "engine/pipeline_model.h"

#include <algorithm>

#include "common/error.h"
#include "engine/emulation.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

// "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight" -> decoder layer 3.
int adapterDecoderLayer(const std::string& name) {
  const std::string key = "model.layers.";
  const auto at = name.find(key);
  RP_CHECK(at != std::string::npos, "adapter name '{}' has no layer index", name);
  return std::stoi(name.substr(at + key.size()));
}

}  // namespace

PipelineModel::PipelineModel(std::shared_ptr<model::CausalLM> model, const std::vector<model::NamedTensor>& adapters)
    : model_(std::move(model)), frozenBase_(!adapters.empty()) {
  RP_CHECK(!model_->allocated(), "the pipeline model is built unallocated (its stages are bound to slots)");
  const int L = layerCount();
  byLayer_.resize(static_cast<std::size_t>(L));
  const bool fullFineTune = adapters.empty();
  auto add = [&](const model::NamedTensor& p, int layer, bool trainable) {
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].local.is_same(p.second)) {  // a tied tensor: one more user
        tensors_[i].layers.push_back(layer);
        byLayer_[static_cast<std::size_t>(layer)].push_back(static_cast<int>(i));
        return;
      }
    }
    tensors_.push_back({p.first, p.second, trainable, {layer}});
    byLayer_[static_cast<std::size_t>(layer)].push_back(static_cast<int>(tensors_.size() - 1));
  };
  for (const auto& p : model_->embedding().hfParameters()) add(p, 0, fullFineTune);
  for (std::int64_t i = 0; i < model_->numDecoderLayers(); ++i) {
    for (const auto& p : model_->decoderLayer(i).hfParameters()) add(p, static_cast<int>(i) + 1, fullFineTune);
  }
  for (const auto& a : adapters) add(a, adapterDecoderLayer(a.first) + 1, true);
  for (const auto& p : model_->head().hfParameters()) add(p, L - 1, fullFineTune);
  if (model_->config().tieWordEmbeddings)
    add({"model.embed_tokens.weight", model_->embedding().weight}, L - 1, fullFineTune);
}

std::vector<int> PipelineModel::tensorsOf(int begin, int end) const {
  std::vector<int> out;
  for (int l = begin; l < end; ++l) {
    for (int i : tensorsOfLayer(l)) {
      if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    }
  }
  return out;
}

std::size_t PipelineModel::bytes(int tensor) const {
  return static_cast<std::size_t>(tensors_.at(static_cast<std::size_t>(tensor)).local.nbytes());
}

void PipelineModel::bind(int tensor, void* memory, std::shared_ptr<void> owner, torch::Device device) {
  torch::NoGradGuard noGrad;
  auto& t = tensors_.at(static_cast<std::size_t>(tensor));
  if (device.is_meta()) {  // the emulated device: a shape, no memory (Note [Emulated device])
    const UncountedMeta inTheSlots;  // the stage slots hold these bytes (Note [Emulated compute memory])
    t.local.set_data(torch::empty(t.local.sizes(), torch::TensorOptions().dtype(t.local.scalar_type()).device(device)));
    return;
  }
  t.local.set_data(torch::from_blob(
      memory, t.local.sizes(), [owner = std::move(owner)](void*) mutable { owner.reset(); },
      torch::TensorOptions().dtype(t.local.scalar_type()).device(device)));
}

void PipelineModel::unbindAll() {
  torch::NoGradGuard noGrad;
  const UncountedMeta placeholders;  // an emulated device's meta placeholders hold nothing on the card
  model::ParamOptions placeholder{model::ParamOptions{}.dtype, /*allocate=*/false};
  placeholder.placeholderDevice = model_->placeholderDevice();
  for (auto& t : tensors_) {
    placeholder.dtype = t.local.scalar_type();
    t.local.set_data(model::newParameter(t.local.sizes(), placeholder));
  }
}

torch::Tensor PipelineModel::forward(int l, const torch::Tensor& x, const model::Batch& batch,
                                     const model::AttentionContext& ctx, model::RouterStats* router,
                                     model::ExpertChoice* choice) {
  RP_CHECK(l >= 0 && l < layerCount() - 1, "layer {} is not a forward layer", l);
  if (l == 0) return model_->embedding().forward(batch.inputIds);
  return model_->decoderLayer(l - 1).forward(x, ctx, router, choice);
}

bool PipelineModel::sparse(int l) const {
  return l > 0 && l < layerCount() - 1 && model_->decoderLayer(l - 1).sparse();
}

model::LossSum PipelineModel::loss(const torch::Tensor& x, const model::Batch& batch, std::int64_t chunkTokens) {
  return model_->head().loss(x, batch.targets, chunkTokens);
}

}  // namespace rp::engine
