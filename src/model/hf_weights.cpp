// Hugging Face safetensors -> CausalLM parameters (declared in causal_lm.h).
#include <set>

#include "common/error.h"
#include "common/log.h"
#include "model/causal_lm.h"
#include "model/expert_layout.h"
#include "model/libtorch.h"
#include "model/mxfp4.h"
#include "model/nf4.h"
#include "model/safetensors.h"
#include "model/torch_bridge.h"

namespace rp::model {

namespace {

// Copies the stored tensor `view` into `param` after checking its shape and dtype.
void copyChecked(const safetensors::TensorView& view, const std::string& name, torch::Tensor param) {
  if (view.shape != param.sizes().vec()) {
    RP_THROW(InputError, "{}: tensor '{}' has shape [{}] but config.json implies [{}]", *view.file, name,
             fmt::join(view.shape, ", "), fmt::join(param.sizes(), ", "));
  }
  using safetensors::DType;
  if (view.dtype != DType::kF32 && view.dtype != DType::kBF16 && view.dtype != DType::kF16) {
    RP_THROW(InputError, "{}: tensor '{}' has dtype {}; model weights must be F32, BF16 or F16", *view.file, name,
             safetensors::dtypeName(view.dtype));
  }
  param.copy_(toTorch(view));
}

// A weight stored as bitsandbytes NF4: an InputError naming the tensor unless it is, with `shape`.
Nf4Tensor readNf4(const safetensors::CheckpointReader& reader, const std::string& name,
                  const std::vector<std::int64_t>& shape, std::vector<std::string>& parts) {
  Nf4Tensor q = readBnb4bit(reader, name, parts);
  if (q.shape != shape) {
    RP_THROW(InputError, "{}: tensor '{}' is stored NF4 with shape [{}] but config.json implies [{}]",
             reader.directory(), name, fmt::join(q.shape, ", "), fmt::join(shape, ", "));
  }
  return q;
}

// A packed NF4 weight: a bitsandbytes NF4 tensor of the same kind as stored (its bytes), another one
// requantised from its values; an unquantised one quantised from its values in the model dtype (what a
// bitsandbytes load of a `dtype` checkpoint quantises).
void loadPacked(const safetensors::CheckpointReader& reader, const safetensors::TensorView& view,
                const Nf4Packing& packing, torch::ScalarType dtype, torch::Tensor param, std::set<std::string>& used) {
  used.insert(view.name);
  if (storedQuantized(reader, view.name)) {
    std::vector<std::string> parts;
    Nf4Tensor q = readNf4(reader, view.name, packing.shape, parts);
    used.insert(parts.begin(), parts.end());
    if (q.nested != packing.doubleQuant || q.blocksize != kNf4BlockSize) {
      q = quantizeNf4(dequantizeNf4(q), packing.doubleQuant);
    }
    packNf4(q, packing, param);
    return;
  }
  auto values = torch::empty(packing.shape, dtype);
  copyChecked(view, view.name, values);
  packNf4(quantizeNf4(values, packing.doubleQuant), packing, param);
}

}  // namespace

std::string storedName(const safetensors::CheckpointReader& reader, const std::string& name) {
  if (reader.find(name) != nullptr) return name;
  std::vector<std::string> candidates;
  if (name.rfind("model.", 0) == 0) {
    candidates = {"language_model." + name, "model.language_model." + name.substr(6)};
  } else if (name.rfind("lm_head.", 0) == 0) {
    candidates = {"language_model." + name};
  }
  for (const auto& candidate : candidates) {
    if (reader.find(candidate) != nullptr) return candidate;
  }
  return name;
}

bool outsideTextModel(const std::string& stored) {
  for (const char* prefix : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                             "model.multi_modal_projector.", "model.visual.", "mtp."}) {
    if (stored.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> loadHfWeights(CausalLM& model, const std::string& directory) {
  const safetensors::CheckpointReader reader(directory);
  const bool tied = model.config().tieWordEmbeddings;
  std::set<std::string> used;
  torch::NoGradGuard noGrad;
  auto missing = [&](const std::string& name) {
    RP_THROW(InputError,
             "{}: tensor '{}' is missing from the checkpoint (config.json: {} layers, tie_word_embeddings={})",
             directory, name, model.config().numLayers, tied);
  };
  for (auto& [name, param] : model.hfParameters()) {
    const safetensors::TensorView* view = reader.find(storedName(reader, name));
    // Tied embeddings may be stored under either name (TinyStories stores only lm_head.weight).
    if (view == nullptr && tied && name == "model.embed_tokens.weight") {
      view = reader.find(storedName(reader, "lm_head.weight"));
    }
    const Architecture arch = model.config().arch;
    if (view == nullptr && arch == Architecture::kGptOss && isStackedExperts(name)) {
      // Published GPT-OSS checkpoints store the experts MXFP4-quantized (model/mxfp4.h).
      const safetensors::TensorView* blocks = reader.find(name + "_blocks");
      const safetensors::TensorView* scales = reader.find(name + "_scales");
      if (blocks == nullptr || scales == nullptr) {
        RP_THROW(InputError,
                 "{}: tensor '{}' is missing from the checkpoint (neither stored as such nor MXFP4-quantized as "
                 "'{}_blocks' and '{}_scales')",
                 directory, name, name, name);
      }
      dequantizeMxfp4(*blocks, *scales, param);
      used.insert(blocks->name);
      used.insert(scales->name);
      continue;
    }
    if (view == nullptr && arch == Architecture::kQwen3Moe && isStackedExperts(name)) {
      // Published MoE checkpoints store each expert's projections (model/expert_layout.h).
      for (auto& [part, slice] : perExpertViews(name, param)) {
        const safetensors::TensorView* partView = reader.find(part);
        if (partView == nullptr) missing(part);
        copyChecked(*partView, part, slice);
        used.insert(part);
      }
      continue;
    }
    if (const Nf4Packing* packing = model.packing(name)) {  // Note [Packed NF4]
      if (view == nullptr) missing(name);
      loadPacked(reader, *view, *packing, model.dtype(), param, used);
      continue;
    }
    if (view != nullptr && storedQuantized(reader, view->name)) {
      // A bitsandbytes 4-bit checkpoint (model/nf4.h): dequantized at load, as transformers does for compute.
      if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
        RP_THROW(InputError,
                 "{}: tensor '{}' is stored quantized; supported: bitsandbytes checkpoints whose embedding and LM head "
                 "are not (transformers' default: llm_int8_skip_modules keeps lm_head)",
                 directory, view->name);
      }
      std::vector<std::string> parts;
      param.copy_(dequantizeNf4(readNf4(reader, view->name, param.sizes().vec(), parts)));
      used.insert(view->name);
      used.insert(parts.begin(), parts.end());
      continue;
    }
    if (view == nullptr) missing(name);
    copyChecked(*view, name, param);
    used.insert(view->name);
  }
  std::vector<std::string> unused;
  std::size_t outside = 0;
  const std::string storedHead = storedName(reader, "lm_head.weight");
  const std::string storedEmbedding = storedName(reader, "model.embed_tokens.weight");
  for (const auto& name : reader.names()) {
    // With tied embeddings a checkpoint may store the head copy too; it is the same tensor.
    const bool tiedCopy = tied && (name == storedHead || name == storedEmbedding);
    if (used.count(name) || tiedCopy) continue;
    if (outsideTextModel(name)) {
      ++outside;
    } else {
      unused.push_back(name);
    }
  }
  if (outside > 0) {
    RP_LOG_INFO(
        "{}: the text model is loaded; {} tensor(s) outside it (vision tower, projector, multi-token prediction) are "
        "left as they are",
        directory, outside);
  }
  if (!unused.empty()) {
    RP_LOG_WARN("{}: {} stored tensor(s) not used by the model, first: '{}'", directory, unused.size(), unused[0]);
  }
  return unused;
}

}  // namespace rp::model
