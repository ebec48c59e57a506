// The model architecture as described by a Hugging Face config.json (Llama, Qwen3, Qwen3-MoE). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rp::model {

enum class Architecture { kLlama, kQwen3, kQwen3Moe };

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";              // default | linear | llama3
  double factor = 1.0;                       // linear, llama3
  double lowFreqFactor = 1.0;                // llama3
  double highFreqFactor = 4.0;               // llama3
  std::int64_t originalMaxPositions = 8192;  // llama3
};

// Mixture of experts (Qwen3-MoE, docs/moe.md): which decoder layers route each token to `expertsPerToken` of
// `numExperts` SwiGLU experts, and the load-balancing loss transformers adds to the training loss.
struct MoeConfig {
  std::int64_t numExperts = 0;  // 0: a dense model
  std::int64_t expertsPerToken = 0;
  std::int64_t expertIntermediateSize = 0;
  bool normTopkProb = false;                // renormalise the top-k probabilities to sum to one
  std::int64_t sparseStep = 1;              // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0
  std::vector<std::int64_t> mlpOnlyLayers;  // dense layers regardless of the step
  double routerAuxLossCoef = 0.0;
  bool outputRouterLogits = false;  // transformers adds the auxiliary loss only when this is true

  // Whether decoder layer `layer` is a sparse (expert) layer.
  bool sparse(std::int64_t layer) const;
  // Whether training adds the load-balancing loss.
  bool auxLoss() const { return numExperts > 0 && outputRouterLogits && routerAuxLossCoef != 0.0; }
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::int64_t vocabSize = 0;
  std::int64_t hiddenSize = 0;
  std::int64_t intermediateSize = 0;
  std::int64_t numLayers = 0;
  std::int64_t numHeads = 0;
  std::int64_t numKvHeads = 0;
  std::int64_t headDim = 0;  // may differ from hiddenSize / numHeads (Qwen3)
  std::int64_t maxPositions = 0;
  double rmsNormEps = 1e-6;
  RopeConfig rope;
  bool tieWordEmbeddings = false;
  bool attentionBias = false;  // q/k/v/o projections carry biases
  bool mlpBias = false;
  bool qkNorm = false;  // per-head RMSNorm on queries and keys (Qwen3)
  std::int64_t bosTokenId = -1;
  std::int64_t eosTokenId = -1;
  double initializerRange = 0.02;       // std of the normal init for training from scratch
  std::string storedDtype = "float32";  // torch_dtype / dtype of the checkpoint, informational
  MoeConfig moe;
};

const char* architectureName(Architecture arch);

// Parses and validates; `source` (a file name) prefixes every error message.
ModelConfig parseModelConfig(const nlohmann::json& json, const std::string& source);
// Reads <path>/config.json when `path` is a directory (a model directory), else the file `path`.
ModelConfig loadModelConfig(const std::string& path);

}  // namespace rp::model
