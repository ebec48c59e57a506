// The model architecture as described by a Hugging Face config.json (Llama and Qwen3 dense). Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace rp::model {

enum class Architecture { kLlama, kQwen3 };

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";              // default | linear | llama3
  double factor = 1.0;                       // linear, llama3
  double lowFreqFactor = 1.0;                // llama3
  double highFreqFactor = 4.0;               // llama3
  std::int64_t originalMaxPositions = 8192;  // llama3
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
};

const char* architectureName(Architecture arch);

// Parses and validates; `source` (a file name) prefixes every error message.
ModelConfig parseModelConfig(const nlohmann::json& json, const std::string& source);
// Reads <path>/config.json when `path` is a directory (a model directory), else the file `path`.
ModelConfig loadModelConfig(const std::string& path);

}  // namespace rp::model
