// The model as the pipeline sees it: layers indexed 0 (embedding) .. L-1 (head with the loss), and every
// tensor with the layers that use it (a tied embedding is used by layer 0 and by the head). A worker's
// replica of this model lives in the worker's memory (placeIn): uploads copy the store's weights into it,
// downloads copy its gradients out.
// Thread-safety: one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/worker.h"
#include "model/causal_lm.h"

namespace rp::engine {

struct TensorEntry {
  std::string name;     // HF or PEFT name
  torch::Tensor local;  // the replica's tensor
  bool trainable = false;
  std::vector<int> layers;  // layers that use it, ascending
};

class PipelineModel {
 public:
  // `adapters` are LoRA tensors (trainable; the base is then frozen) or empty for a full fine-tune.
  PipelineModel(std::shared_ptr<model::CausalLM> model, const std::vector<model::NamedTensor>& adapters);

  int layerCount() const { return static_cast<int>(model_->numDecoderLayers()) + 2; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // Indices into tensors() used by layer l.
  const std::vector<int>& tensorsOfLayer(int l) const { return byLayer_.at(static_cast<std::size_t>(l)); }
  model::CausalLM& model() { return *model_; }
  // Moves every tensor's storage into memory `worker` allocates (values kept); the modules see the new
  // storage. Before training.
  void placeIn(device::Worker& worker);

  // Layer l < L-1: layer 0 embeds batch.inputIds (x unused); the others are decoder layers.
  torch::Tensor forward(int l, const torch::Tensor& x, const model::Batch& batch, const model::AttentionContext& ctx);
  // The head (layer L-1): summed token loss.
  model::LossSum loss(const torch::Tensor& x, const model::Batch& batch, std::int64_t chunkTokens);

 private:
  std::shared_ptr<model::CausalLM> model_;
  std::vector<TensorEntry> tensors_;
  std::vector<std::vector<int>> byLayer_;
};

}  // namespace rp::engine
