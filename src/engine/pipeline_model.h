// The model as the pipeline sees it: layers indexed 0 (embedding) .. L-1 (head with the loss), and every
// tensor with the layers that use it (a tied embedding is used by layer 0 and by the head). The model is
// built unallocated: its tensors hold no memory until bound — to views of the worker's stage slots for the
// stage a job runs (stage_slots.h; uploads copy the store's weights into them, downloads copy gradients out),
// or to the node store's weights (loading, sampling).
// Thread-safety: one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace rp::engine {

struct TensorEntry {
  std::string name;     // HF or PEFT name
  torch::Tensor local;  // the module's tensor: a placeholder, or bound to memory
  bool trainable = false;
  std::vector<int> layers;  // layers that use it, ascending
};

class PipelineModel {
 public:
  // `model` is unallocated (CausalLM(..., allocate = false)); `adapters` are its LoRA tensors (trainable; the
  // base is then frozen) or empty for a full fine-tune.
  PipelineModel(std::shared_ptr<model::CausalLM> model, const std::vector<model::NamedTensor>& adapters);

  int layerCount() const { return static_cast<int>(model_->numDecoderLayers()) + 2; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // Indices into tensors() used by layer l; by any layer of [begin, end), each once, in first-use order.
  const std::vector<int>& tensorsOfLayer(int l) const { return byLayer_.at(static_cast<std::size_t>(l)); }
  std::vector<int> tensorsOf(int begin, int end) const;
  model::CausalLM& model() { return *model_; }
  const model::CausalLM& model() const { return *model_; }
  torch::ScalarType dtype() const { return model_->dtype(); }
  // LoRA: the base's weights (every layer's, the head's) are frozen; the adapters alone train.
  bool frozenBase() const { return frozenBase_; }
  std::size_t bytes(int tensor) const;  // of the tensor in the model dtype
  // Points tensor `tensor` at `memory` on `device` (bytes(tensor) bytes; the values stay what the memory
  // holds); `owner` keeps the memory alive while the tensor points there. On the meta device (the emulated one)
  // the tensor gets its shape and no memory. unbindAll: every tensor back to a placeholder.
  void bind(int tensor, void* memory, std::shared_ptr<void> owner = nullptr, torch::Device device = torch::kCPU);
  void unbindAll();

  // Layer l < L-1: layer 0 embeds batch.inputIds (x unused); the others are decoder layers, whose router
  // statistics (sparse layers) go to `router` and whose routing is recorded in or replayed from `choice`
  // (model::SparseMoe::forward) when given.
  torch::Tensor forward(int l, const torch::Tensor& x, const model::Batch& batch, const model::AttentionContext& ctx,
                        model::RouterStats* router = nullptr, model::ExpertChoice* choice = nullptr);
  // Whether layer l is a MoE decoder layer.
  bool sparse(int l) const;
  // The head (layer L-1): summed token loss.
  model::LossSum loss(const torch::Tensor& x, const model::Batch& batch, std::int64_t chunkTokens);

 private:
  std::shared_ptr<model::CausalLM> model_;
  std::vector<TensorEntry> tensors_;
  std::vector<std::vector<int>> byLayer_;
  bool frozenBase_ = false;
};

}  // namespace rp::engine
