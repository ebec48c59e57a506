// A causal language model as a layer list: embedding, decoder layers, head (see layers.h).
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layers.h"

namespace rp::safetensors {
class CheckpointReader;
}

namespace rp::model {

class CausalLM : public torch::nn::Module {
 public:
  // Parameters are allocated (uninitialised) in `dtype`; load weights with loadHfWeights(). With
  // `allocate` false they are placeholders (layers.h, ParamOptions) bound to memory by the caller.
  CausalLM(const ModelConfig& config, torch::ScalarType dtype, bool allocate = true);
  // options.nf4Base: the base's linear weights packed NF4 (layers.h, ParamOptions).
  CausalLM(const ModelConfig& config, const ParamOptions& options);

  const ModelConfig& config() const { return config_; }
  torch::ScalarType dtype() const { return dtype_; }
  bool allocated() const { return allocated_; }
  torch::Device placeholderDevice() const { return placeholderDevice_; }  // of an unallocated model
  std::int64_t numDecoderLayers() const { return static_cast<std::int64_t>(layers_.size()); }

  Embedding& embedding() { return *embedding_; }
  DecoderLayer& decoderLayer(std::int64_t i) { return *layers_.at(static_cast<std::size_t>(i)); }
  Head& head() { return *head_; }
  const Rotary& rotary() const { return rotary_; }

  // Whole-model conveniences built from the layers above.
  // Output of the last decoder layer; `router` collects the sparse layers' router statistics.
  torch::Tensor hidden(const Batch& batch, RouterStats* router = nullptr);
  torch::Tensor logits(const Batch& batch);
  // The token loss, and for a MoE model whose config asks for it the load-balancing loss (LossSum::aux).
  LossSum loss(const Batch& batch, std::int64_t chunkTokens = 0);

  // Every parameter once, under its Hugging Face name, in layer order (a packed NF4 weight as its buffer).
  std::vector<NamedTensor> hfParameters() const;
  // The packing of the weight `name` where it is stored NF4, else null.
  const Nf4Packing* packing(const std::string& name) const;

 private:
  ModelConfig config_;
  torch::ScalarType dtype_;
  bool allocated_;
  torch::Device placeholderDevice_;
  Rotary rotary_;
  std::shared_ptr<Embedding> embedding_;
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  std::shared_ptr<Head> head_;
  std::map<std::string, Nf4Packing> packed_;
};

// Fills every parameter from a Hugging Face model directory (safetensors, sharded or not), converting
// F32/BF16/F16 to the model dtype; a packed NF4 weight is quantised from those values, or taken as stored from
// a bitsandbytes 4-bit checkpoint of the same kind. Missing tensors, shape mismatches and unsupported dtypes
// are InputErrors naming the file and tensor. Returns the names of stored tensors the model did not use.
// A multimodal checkpoint's text model (Gemma 3's, model/config.h) is read from under its language model's
// prefix; the vision tower and projector are left out, with one notice.
std::vector<std::string> loadHfWeights(CausalLM& model, const std::string& directory);

// The name under which `reader`'s checkpoint stores the text model's tensor `name` (model.*, lm_head.*): `name`
// itself, or a multimodal checkpoint's language model's (language_model.model.*, language_model.lm_head.*, as
// Gemma 3's are published and saved; transformers 5's model.language_model.*). `name` where none is stored.
std::string storedName(const safetensors::CheckpointReader& reader, const std::string& name);
// Whether a stored tensor is outside a multimodal checkpoint's text model (its vision tower and projector; Qwen3.5's
// multi-token-prediction head `mtp.*`, which transformers does not load either), which fine-tuning the text model
// leaves as it is.
bool outsideTextModel(const std::string& stored);

// Initialises every parameter as transformers does for a new model: normal(0, initializer_range) for
// embeddings and projections (a packed NF4 weight: those values, quantised), ones for norms (zeros for the
// (1 + w) norms of NormStyle::kGemma), Qwen3.5's decays as its _init_weights draws them. Uses LibTorch's RNG (the
// caller seeds it).
void initRandom(CausalLM& model);

// Config + weights in one call.
std::shared_ptr<CausalLM> loadHfModel(const std::string& directory, torch::ScalarType dtype);

}  // namespace rp::model
