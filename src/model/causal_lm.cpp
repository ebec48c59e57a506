#include "model/causal_lm.h"

#include <torch/torch.h>

namespace rp::model {

CausalLM::CausalLM(const ModelConfig& config, torch::ScalarType dtype, bool allocate)
    : CausalLM(config, ParamOptions{dtype, allocate}) {}

CausalLM::CausalLM(const ModelConfig& config, const ParamOptions& options)
    : config_(config), dtype_(options.dtype), allocated_(options.allocate), rotary_(config) {
  embedding_ = register_module("embed_tokens", std::make_shared<Embedding>(config, options));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.numLayers; ++i) {
    layers_.push_back(std::make_shared<DecoderLayer>(config, i, options));
    list->push_back(layers_.back());
  }
  head_ = register_module("head", std::make_shared<Head>(config, *embedding_, options));
  for (const auto& layer : layers_) {
    for (const char* target : {"q", "k", "v", "o", "gate", "up", "down"}) {
      const Projection* p = layer->projection(target);
      if (p != nullptr && p->packing()) packed_.emplace(layer->projectionPath(target) + ".weight", *p->packing());
    }
  }
}

const Nf4Packing* CausalLM::packing(const std::string& name) const {
  const auto it = packed_.find(name);
  return it == packed_.end() ? nullptr : &it->second;
}

torch::Tensor CausalLM::hidden(const Batch& batch, RouterStats* router) {
  const AttentionContext ctx = rotary_.context(batch, dtype_);
  torch::Tensor h = embedding_->forward(batch.inputIds);
  for (const auto& layer : layers_) h = layer->forward(h, ctx, router);
  return h;
}

torch::Tensor CausalLM::logits(const Batch& batch) {
  return head_->logits(hidden(batch));
}

LossSum CausalLM::loss(const Batch& batch, std::int64_t chunkTokens) {
  if (!config_.moe.auxLoss()) return head_->loss(hidden(batch), batch.targets, chunkTokens);
  RouterStats router;
  LossSum out = head_->loss(hidden(batch, &router), batch.targets, chunkTokens);
  if (router.rows > 0) out.aux = routerAuxLoss(router, config_.moe);  // else every layer is dense
  return out;
}

std::vector<NamedTensor> CausalLM::hfParameters() const {
  std::vector<NamedTensor> out = embedding_->hfParameters();
  for (const auto& layer : layers_) {
    for (auto& p : layer->hfParameters()) out.push_back(std::move(p));
  }
  for (auto& p : head_->hfParameters()) out.push_back(std::move(p));
  return out;
}

void initRandom(CausalLM& model) {
  torch::NoGradGuard noGrad;
  for (auto& [name, param] : model.hfParameters()) {
    // As transformers' _init_weights: GPT-OSS's sinks and router bias are drawn, other biases start at zero.
    const bool drawn = name.ends_with("sinks") || name.ends_with("router.bias");
    if (const Nf4Packing* packing = model.packing(name)) {  // a 1-D buffer, drawn as its weight
      const auto values = torch::empty(packing->shape, model.dtype()).normal_(0.0, model.config().initializerRange);
      packNf4(quantizeNf4(values, packing->doubleQuant), *packing, param);
    } else if (param.dim() == 1 && name.find("norm") != std::string::npos) {
      param.fill_(1.0);
    } else if (!drawn && (param.dim() == 1 || name.ends_with("bias"))) {
      param.zero_();  // biases
    } else {
      param.normal_(0.0, model.config().initializerRange);
    }
  }
}

std::shared_ptr<CausalLM> loadHfModel(const std::string& directory, torch::ScalarType dtype) {
  auto model = std::make_shared<CausalLM>(loadModelConfig(directory), dtype);
  loadHfWeights(*model, directory);
  return model;
}

}  // namespace rp::model
