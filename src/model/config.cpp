#include "model/config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::model {
namespace {

using nlohmann::json;

class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

  std::int64_t positiveInt(const char* key) const {
    const json& v = required(key, "a positive integer");
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected a positive integer", source_, key, v.dump());
    }
    return v.get<std::int64_t>();
  }
  std::int64_t positiveIntOr(const char* key, std::int64_t fallback) const {
    return has(key) ? positiveInt(key) : fallback;
  }
  double positiveNumber(const json& v, const char* key) const {
    if (!v.is_number() || v.get<double>() <= 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected a positive number", source_, key, v.dump());
    }
    return v.get<double>();
  }
  double positiveNumberOr(const char* key, double fallback) const {
    return has(key) ? positiveNumber(j_.at(key), key) : fallback;
  }
  bool boolOr(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) RP_THROW(InputError, "{}: field '{}' is {}, expected true or false", source_, key, v.dump());
    return v.get<bool>();
  }
  std::string stringOr(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) RP_THROW(InputError, "{}: field '{}' is {}, expected a string", source_, key, v.dump());
    return v.get<std::string>();
  }
  // A token id, or the first of a list of ids (eos_token_id may be a list); -1 when absent or null.
  std::int64_t tokenIdOr(const char* key) const {
    if (!has(key)) return -1;
    const json& v = j_.at(key);
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<std::int64_t>();
    if (v.is_number_integer()) return v.get<std::int64_t>();
    RP_THROW(InputError, "{}: field '{}' is {}, expected a token id or a list of ids", source_, key, v.dump());
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& required(const char* key, const char* expected) const {
    if (!has(key)) RP_THROW(InputError, "{}: field '{}' is missing (expected {})", source_, key, expected);
    return j_.at(key);
  }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

// RoPE: the pre-v5 form (rope_theta + rope_scaling) and the v5 form (rope_parameters) are both accepted.
RopeConfig parseRope(const json& j, const Fields& f) {
  RopeConfig rope;
  const json* params = nullptr;
  const char* paramsKey = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (f.has(key)) {
      params = &j.at(key);
      paramsKey = key;
      break;
    }
  }
  rope.theta = f.positiveNumberOr("rope_theta", rope.theta);
  if (params == nullptr) return rope;
  if (!params->is_object()) {
    RP_THROW(InputError, "{}: field '{}' is {}, expected an object", f.source(), paramsKey, params->dump());
  }
  const Fields p(*params, f.source());
  rope.theta = p.positiveNumberOr("rope_theta", rope.theta);
  rope.type = p.stringOr("rope_type", p.stringOr("type", "default"));
  if (rope.type == "default") return rope;
  if (rope.type == "linear") {
    rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
    return rope;
  }
  if (rope.type == "llama3") {
    rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
    rope.lowFreqFactor = p.positiveNumber(p.required("low_freq_factor", "a positive number"), "low_freq_factor");
    rope.highFreqFactor = p.positiveNumber(p.required("high_freq_factor", "a positive number"), "high_freq_factor");
    rope.originalMaxPositions = p.positiveInt("original_max_position_embeddings");
    if (rope.highFreqFactor <= rope.lowFreqFactor) {
      RP_THROW(InputError, "{}: {}.high_freq_factor ({}) must exceed low_freq_factor ({})", f.source(), paramsKey,
               rope.highFreqFactor, rope.lowFreqFactor);
    }
    return rope;
  }
  RP_THROW(InputError, "{}: {}.rope_type '{}' is not supported (supported: default, linear, llama3)", f.source(),
           paramsKey, rope.type);
}

// Qwen3-MoE's expert fields; defaults are Qwen3MoeConfig's for the optional ones.
MoeConfig parseMoe(const json& j, const Fields& f) {
  MoeConfig m;
  m.numExperts = f.has("num_experts") ? f.positiveInt("num_experts") : f.positiveInt("num_local_experts");
  m.expertsPerToken = f.positiveInt("num_experts_per_tok");
  if (m.expertsPerToken > m.numExperts) {
    RP_THROW(InputError, "{}: num_experts_per_tok ({}) exceeds the number of experts ({})", f.source(),
             m.expertsPerToken, m.numExperts);
  }
  m.expertIntermediateSize = f.positiveInt("moe_intermediate_size");
  m.normTopkProb = f.boolOr("norm_topk_prob", false);
  m.sparseStep = f.positiveIntOr("decoder_sparse_step", 1);
  if (f.has("mlp_only_layers")) {
    const json& layers = j.at("mlp_only_layers");
    if (!layers.is_array()) {
      RP_THROW(InputError, "{}: field 'mlp_only_layers' is {}, expected a list of layer indices", f.source(),
               layers.dump());
    }
    for (const auto& l : layers) {
      if (!l.is_number_integer() || l.get<std::int64_t>() < 0) {
        RP_THROW(InputError, "{}: field 'mlp_only_layers' holds {}, expected layer indices >= 0", f.source(), l.dump());
      }
      m.mlpOnlyLayers.push_back(l.get<std::int64_t>());
    }
  }
  m.routerAuxLossCoef = 0.001;
  if (f.has("router_aux_loss_coef")) {
    const json& v = j.at("router_aux_loss_coef");
    if (!v.is_number() || v.get<double>() < 0) {
      RP_THROW(InputError, "{}: field 'router_aux_loss_coef' is {}, expected a number >= 0", f.source(), v.dump());
    }
    m.routerAuxLossCoef = v.get<double>();
  }
  m.outputRouterLogits = f.boolOr("output_router_logits", false);
  return m;
}

}  // namespace

bool MoeConfig::sparse(std::int64_t layer) const {
  if (numExperts == 0) return false;
  for (const auto l : mlpOnlyLayers) {
    if (l == layer) return false;
  }
  return (layer + 1) % sparseStep == 0;
}

const char* architectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kQwen3Moe:
      return "qwen3_moe";
    case Architecture::kLlama:
      break;
  }
  return "llama";
}

ModelConfig parseModelConfig(const json& j, const std::string& source) {
  if (!j.is_object()) RP_THROW(InputError, "{}: expected a JSON object", source);
  const Fields f(j, source);
  ModelConfig c;
  const json& type = f.required("model_type", "\"llama\", \"qwen3\" or \"qwen3_moe\"");
  if (type == "llama") {
    c.arch = Architecture::kLlama;
  } else if (type == "qwen3") {
    c.arch = Architecture::kQwen3;
  } else if (type == "qwen3_moe") {
    c.arch = Architecture::kQwen3Moe;
  } else {
    RP_THROW(InputError, "{}: model_type {} is not supported (supported: \"llama\", \"qwen3\", \"qwen3_moe\")", source,
             type.dump());
  }
  c.vocabSize = f.positiveInt("vocab_size");
  c.hiddenSize = f.positiveInt("hidden_size");
  c.intermediateSize = f.positiveInt("intermediate_size");
  c.numLayers = f.positiveInt("num_hidden_layers");
  c.numHeads = f.positiveInt("num_attention_heads");
  c.numKvHeads = f.positiveIntOr("num_key_value_heads", c.numHeads);
  if (c.numHeads % c.numKvHeads != 0) {
    RP_THROW(InputError, "{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", source,
             c.numHeads, c.numKvHeads);
  }
  if (c.arch == Architecture::kLlama && !f.has("head_dim") && c.hiddenSize % c.numHeads != 0) {
    RP_THROW(InputError, "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is absent",
             source, c.hiddenSize, c.numHeads);
  }
  c.headDim = f.positiveIntOr("head_dim", c.hiddenSize / c.numHeads);
  if (c.headDim % 2 != 0) RP_THROW(InputError, "{}: head_dim ({}) must be even for RoPE", source, c.headDim);
  c.maxPositions = f.positiveIntOr("max_position_embeddings", 4096);
  c.rmsNormEps = f.positiveNumberOr("rms_norm_eps", 1e-6);
  c.rope = parseRope(j, f);
  c.tieWordEmbeddings = f.boolOr("tie_word_embeddings", false);
  c.attentionBias = f.boolOr("attention_bias", false);
  c.mlpBias = f.boolOr("mlp_bias", false);
  c.qkNorm = c.arch != Architecture::kLlama;
  if (c.arch == Architecture::kQwen3Moe) c.moe = parseMoe(j, f);
  c.bosTokenId = f.tokenIdOr("bos_token_id");
  c.eosTokenId = f.tokenIdOr("eos_token_id");
  c.initializerRange = f.positiveNumberOr("initializer_range", 0.02);
  c.storedDtype = f.stringOr("torch_dtype", f.stringOr("dtype", "float32"));

  const std::string act = f.stringOr("hidden_act", "silu");
  if (act != "silu") RP_THROW(InputError, "{}: hidden_act '{}' is not supported (supported: silu)", source, act);
  if (f.boolOr("use_sliding_window", false)) {
    RP_THROW(InputError, "{}: use_sliding_window=true is not supported (full causal attention only)", source);
  }
  if (f.has("layer_types")) {
    for (const auto& layerType : j.at("layer_types")) {
      if (layerType != "full_attention") {
        RP_THROW(InputError, "{}: layer_types contains {}; only \"full_attention\" is supported", source,
                 layerType.dump());
      }
    }
  }
  if (f.positiveIntOr("pretraining_tp", 1) != 1) {
    RP_THROW(InputError, "{}: pretraining_tp > 1 is not supported", source);
  }
  return c;
}

ModelConfig loadModelConfig(const std::string& where) {
  const std::string path =
      std::filesystem::is_directory(where) ? (std::filesystem::path(where) / "config.json").string() : where;
  std::ifstream in(path);
  if (!in) RP_THROW(InputError, "{}: cannot open (expected a Hugging Face config.json)", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: not valid JSON: {}", path, e.what());
  }
  return parseModelConfig(j, path);
}

}  // namespace rp::model
