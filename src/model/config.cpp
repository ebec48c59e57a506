#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::model {
namespace {

using nlohmann::json;

// The model_type values we read, in the order the documentation lists them.
constexpr std::pair<const char*, Architecture> kArchitectures[] = {
    {"llama", Architecture::kLlama},     {"mistral", Architecture::kMistral},    {"qwen2", Architecture::kQwen2},
    {"qwen3", Architecture::kQwen3},     {"qwen3_moe", Architecture::kQwen3Moe}, {"gpt_oss", Architecture::kGptOss},
    {"granite", Architecture::kGranite}, {"gemma2", Architecture::kGemma2},      {"phi3", Architecture::kPhi3},
    {"olmo2", Architecture::kOlmo2},     {"glm4", Architecture::kGlm4}};

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
  std::int64_t nonNegativeIntOr(const char* key, std::int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      RP_THROW(InputError, "{}: field '{}' is {}, expected an integer >= 0", source_, key, v.dump());
    }
    return v.get<std::int64_t>();
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

// transformers' get_mscale: the YaRN attention factor for a context extended `scale` times.
double yarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// YaRN as transformers' _compute_yarn_parameters reads it; the frequencies themselves are computed in
// model/layers.cpp.
void parseYarn(const Fields& p, RopeConfig& rope) {
  rope.factor = p.positiveNumber(p.required("factor", "a positive number"), "factor");
  rope.originalMaxPositions = p.positiveInt("original_max_position_embeddings");
  rope.betaFast = p.positiveNumberOr("beta_fast", 32.0);
  rope.betaSlow = p.positiveNumberOr("beta_slow", 1.0);
  rope.truncate = p.boolOr("truncate", true);
  const double mscale = p.positiveNumberOr("mscale", 0.0), mscaleAllDim = p.positiveNumberOr("mscale_all_dim", 0.0);
  if (p.has("attention_factor")) {
    rope.attentionFactor = p.positiveNumberOr("attention_factor", 1.0);
  } else if (mscale > 0 && mscaleAllDim > 0) {
    rope.attentionFactor = yarnMscale(rope.factor, mscale) / yarnMscale(rope.factor, mscaleAllDim);
  } else {
    rope.attentionFactor = yarnMscale(rope.factor, 1.0);
  }
}

// A longrope factor list: numbers, one per rotary frequency.
std::vector<double> ropeFactors(const Fields& p, const char* key, std::int64_t count) {
  const json& v = p.required(key, "a list of numbers");
  if (!v.is_array() || static_cast<std::int64_t>(v.size()) != count) {
    RP_THROW(InputError, "{}: field '{}' is {}, expected a list of {} numbers (head_dim x partial_rotary_factor / 2)",
             p.source(), key, v.dump(), count);
  }
  std::vector<double> out;
  for (const auto& x : v) out.push_back(p.positiveNumber(x, key));
  return out;
}

// LongRoPE as transformers' _compute_longrope_parameters reads it for Phi-3 ("su" and "yarn" name it too there):
// the config's top-level original_max_position_embeddings (4096 unless given) over the dict's, the factor
// max_position_embeddings / that unless given, the attention factor sqrt(1 + ln(factor) / ln(original)).
void parseLongrope(const Fields& f, const Fields& p, const ModelConfig& c, RopeConfig& rope) {
  rope.type = "longrope";
  rope.originalMaxPositions = f.positiveIntOr("original_max_position_embeddings", 4096);
  const double original = static_cast<double>(rope.originalMaxPositions);
  rope.factor = p.positiveNumberOr("factor", static_cast<double>(c.maxPositions) / original);
  rope.attentionFactor = p.positiveNumberOr(
      "attention_factor", rope.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(rope.factor) / std::log(original)));
  rope.shortFactor = ropeFactors(p, "short_factor", c.rotaryDim() / 2);
  rope.longFactor = ropeFactors(p, "long_factor", c.rotaryDim() / 2);
}

// RoPE: the pre-v5 form (rope_theta + rope_scaling) and the v5 form (rope_parameters) are both accepted;
// `rope` holds the architecture's defaults. Phi-3 reads rope_scaling first, and longrope.
RopeConfig parseRope(const json& j, const Fields& f, RopeConfig rope, const ModelConfig& c) {
  const bool phi3 = c.arch == Architecture::kPhi3;
  const json* params = nullptr;
  const char* paramsKey = nullptr;
  const char* keys[] = {"rope_parameters", "rope_scaling"};
  if (phi3) std::swap(keys[0], keys[1]);
  for (const char* key : keys) {
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
  if (phi3) {
    if (rope.type != "longrope" && rope.type != "su" && rope.type != "yarn") {
      RP_THROW(InputError, "{}: {}.rope_type '{}' is not supported for phi3 (supported: default, longrope)", f.source(),
               paramsKey, rope.type);
    }
    parseLongrope(f, p, c, rope);
    return rope;
  }
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
  if (rope.type == "yarn") {
    parseYarn(p, rope);
    return rope;
  }
  RP_THROW(InputError, "{}: {}.rope_type '{}' is not supported (supported: default, linear, llama3, yarn)", f.source(),
           paramsKey, rope.type);
}

// The load-balancing loss's fields, with the transformers defaults of both MoE configs.
void parseAuxLoss(const json& j, const Fields& f, MoeConfig& m) {
  m.routerAuxLossCoef = 0.001;
  if (f.has("router_aux_loss_coef")) {
    const json& v = j.at("router_aux_loss_coef");
    if (!v.is_number() || v.get<double>() < 0) {
      RP_THROW(InputError, "{}: field 'router_aux_loss_coef' is {}, expected a number >= 0", f.source(), v.dump());
    }
    m.routerAuxLossCoef = v.get<double>();
  }
  m.outputRouterLogits = f.boolOr("output_router_logits", false);
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
  parseAuxLoss(j, f, m);
  return m;
}

// GPT-OSS's experts (every layer sparse, `intermediate_size` wide); defaults are GptOssConfig's.
MoeConfig parseGptOssMoe(const json& j, const Fields& f) {
  MoeConfig m;
  m.kind = MoeKind::kGptOss;
  m.numExperts = f.has("num_experts") ? f.positiveInt("num_experts") : f.positiveIntOr("num_local_experts", 128);
  m.expertsPerToken = f.positiveIntOr("num_experts_per_tok", 4);
  if (m.expertsPerToken > m.numExperts) {
    RP_THROW(InputError, "{}: num_experts_per_tok ({}) exceeds the number of experts ({})", f.source(),
             m.expertsPerToken, m.numExperts);
  }
  m.expertIntermediateSize = f.positiveInt("intermediate_size");
  m.swigluLimit = f.positiveNumberOr("swiglu_limit", 7.0);
  m.swigluAlpha = f.positiveNumberOr("swiglu_alpha", 1.702);
  parseAuxLoss(j, f, m);
  return m;
}

// layer_types: a list of "full_attention" and (where the family has windows) "sliding_attention".
void parseLayerTypes(const json& j, const Fields& f, bool slidingAllowed, std::vector<bool>& sliding) {
  const json& types = j.at("layer_types");
  const auto layers = static_cast<std::int64_t>(sliding.size());
  if (!types.is_array() || static_cast<std::int64_t>(types.size()) != layers) {
    RP_THROW(InputError, "{}: field 'layer_types' is {}, expected a list of {} layer types", f.source(), types.dump(),
             layers);
  }
  for (std::int64_t i = 0; i < layers; ++i) {
    if (types[i] == "sliding_attention" && slidingAllowed) {
      sliding[i] = true;
    } else if (types[i] == "full_attention") {
      sliding[i] = false;
    } else {
      RP_THROW(InputError, "{}: layer_types[{}] is {}; supported: \"full_attention\"{}", f.source(), i, types[i].dump(),
               slidingAllowed ? ", \"sliding_attention\"" : " (\"sliding_attention\" needs a sliding_window)");
    }
  }
}

// sliding_window where the family's config class defaults it to 4096: absent is 4096, null is none (0).
std::int64_t windowOr4096(const json& j, const Fields& f) {
  if (!j.contains("sliding_window")) return 4096;
  return f.has("sliding_window") ? f.positiveInt("sliding_window") : 0;
}

// Which layers attend within a sliding window, and its width (Note [Sliding windows]).
void parseWindows(const json& j, const Fields& f, ModelConfig& c) {
  c.slidingLayers.assign(static_cast<std::size_t>(c.numLayers), false);
  bool readLayerTypes = true;
  switch (c.arch) {
    case Architecture::kGptOss:
      c.slidingWindow = f.positiveIntOr("sliding_window", 128);
      for (std::int64_t i = 0; i < c.numLayers; i += 2) c.slidingLayers[i] = true;
      break;
    case Architecture::kMistral:
      c.slidingWindow = windowOr4096(j, f);
      c.slidingLayers.assign(c.slidingLayers.size(), c.slidingWindow > 0);
      readLayerTypes = false;  // MistralConfig warns and ignores them
      break;
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
      if (!f.boolOr("use_sliding_window", false)) break;
      c.slidingWindow = windowOr4096(j, f);
      if (c.slidingWindow == 0) break;
      if (c.arch == Architecture::kQwen3Moe) {
        c.slidingLayers.assign(c.slidingLayers.size(), true);
        readLayerTypes = false;  // modeling_qwen3_moe.py slides on every layer
        break;
      }
      for (std::int64_t i = f.nonNegativeIntOr("max_window_layers", 28); i < c.numLayers; ++i) {
        c.slidingLayers[i] = true;
      }
      break;
    case Architecture::kGemma2:  // Gemma2Config: layers 0, 2, 4, ... slide, within 4096 unless given
      c.slidingWindow = windowOr4096(j, f);
      for (std::int64_t i = 0; i < c.numLayers; i += 2) c.slidingLayers[i] = c.slidingWindow > 0;
      break;
    case Architecture::kPhi3:  // Phi3Config: a window on every layer when sliding_window is set (none unless)
      c.slidingWindow = f.positiveIntOr("sliding_window", 0);
      c.slidingLayers.assign(c.slidingLayers.size(), c.slidingWindow > 0);
      readLayerTypes = false;
      break;
    case Architecture::kLlama:
    case Architecture::kGranite:
    case Architecture::kOlmo2:
    case Architecture::kGlm4:
      break;
  }
  if (readLayerTypes && f.has("layer_types")) parseLayerTypes(j, f, c.slidingWindow > 0, c.slidingLayers);
}

// A quantized checkpoint: GPT-OSS's MXFP4 experts (model/mxfp4.h) or a bitsandbytes 4-bit NF4 checkpoint
// (model/nf4.h), both dequantized at load.
void checkQuantization(const json& j, const Fields& f, Architecture arch) {
  if (!f.has("quantization_config")) return;
  const json& q = j.at("quantization_config");
  const std::string method = q.is_object() && q.contains("quant_method") && q.at("quant_method").is_string()
                                 ? q.at("quant_method").get<std::string>()
                                 : q.dump();
  if (method == "bitsandbytes") {
    auto flag = [&](const char* key) { return q.contains(key) && q.at(key).is_boolean() && q.at(key).get<bool>(); };
    if (!flag("load_in_4bit") && !flag("_load_in_4bit")) {
      RP_THROW(InputError,
               "{}: quantization_config is bitsandbytes {}; supported: 4-bit NF4 (load_in_4bit = true, "
               "bnb_4bit_quant_type = \"nf4\"), dequantized at load, or the unquantized checkpoint",
               f.source(),
               flag("load_in_8bit") || flag("_load_in_8bit") ? "8-bit (load_in_8bit)" : "without load_in_4bit");
    }
    const json type = q.value("bnb_4bit_quant_type", json("fp4"));
    if (type != "nf4") {
      RP_THROW(InputError,
               "{}: quantization_config.bnb_4bit_quant_type is {}; supported: \"nf4\" (or the unquantized checkpoint)",
               f.source(), type.dump());
    }
    return;
  }
  if (arch != Architecture::kGptOss || method != "mxfp4") {
    RP_THROW(InputError,
             "{}: quantization_config.quant_method '{}' is not supported (GPT-OSS's mxfp4 experts and bitsandbytes "
             "4-bit NF4 are, dequantized at load; give the unquantized checkpoint)",
             f.source(), method);
  }
}

// A soft-capping field: GemmaXConfig's default when absent, none (0) when null.
double softcapOr(const json& j, const Fields& f, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  return f.has(key) ? f.positiveNumber(j.at(key), key) : 0.0;
}

// Gemma 2 (Gemma2Config's defaults where a field is absent): GeGLU, (1 + w) norms in float32 and four of them a
// layer, the embedding times sqrt(hidden) rounded to the model dtype, scores times query_pre_attn_scalar^-0.5,
// the scores' and the final logits' soft-capping.
void parseGemma2(const json& j, const Fields& f, ModelConfig& c) {
  const std::string act = f.stringOr("hidden_activation", f.stringOr("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh") {
    RP_THROW(InputError, "{}: hidden_activation '{}' is not supported for gemma2 (supported: gelu_pytorch_tanh)",
             f.source(), act);
  }
  c.activation = Activation::kGeluTanh;
  c.normStyle = NormStyle::kGemma;
  c.normPlacement = NormPlacement::kSandwich;
  c.embeddingMultiplier = std::sqrt(static_cast<double>(c.hiddenSize));
  c.embeddingMultiplierInModelDtype = true;
  c.attentionScale = 1.0 / std::sqrt(f.positiveNumberOr("query_pre_attn_scalar", 256.0));
  c.attentionSoftcap = softcapOr(j, f, "attn_logit_softcapping", 50.0);
  c.finalLogitSoftcap = softcapOr(j, f, "final_logit_softcapping", 30.0);
}

Architecture architectureOf(const json& type, const std::string& source) {
  for (const auto& [name, arch] : kArchitectures) {
    if (type == name) return arch;
  }
  RP_THROW(InputError, "{}: model_type {} is not supported (supported: {})", source, type.dump(),
           supportedModelTypes());
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
  for (const auto& [name, a] : kArchitectures) {
    if (a == arch) return name;
  }
  return "unknown";
}

std::string supportedModelTypes() {
  std::string list;
  for (const auto& [name, arch] : kArchitectures) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", name);
  return list;
}

ModelConfig parseModelConfig(const json& j, const std::string& source) {
  if (!j.is_object()) RP_THROW(InputError, "{}: expected a JSON object", source);
  const Fields f(j, source);
  ModelConfig c;
  const json& type = f.required("model_type", "a supported model_type (docs/model.md)");
  c.arch = architectureOf(type, source);
  const bool gptOss = c.arch == Architecture::kGptOss;
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
  const bool gemma2 = c.arch == Architecture::kGemma2, glm4 = c.arch == Architecture::kGlm4;
  if (c.arch != Architecture::kGptOss && c.arch != Architecture::kQwen3 && c.arch != Architecture::kQwen3Moe &&
      !gemma2 && !f.has("head_dim") && c.hiddenSize % c.numHeads != 0) {
    RP_THROW(InputError, "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is absent",
             source, c.hiddenSize, c.numHeads);
  }
  c.headDim = f.positiveIntOr("head_dim", gptOss ? 64 : gemma2 ? 256 : glm4 ? 128 : c.hiddenSize / c.numHeads);
  if (c.headDim % 2 != 0) RP_THROW(InputError, "{}: head_dim ({}) must be even for RoPE", source, c.headDim);
  c.maxPositions = f.positiveIntOr("max_position_embeddings", 4096);
  const bool olmo2 = c.arch == Architecture::kOlmo2;
  c.rmsNormEps = f.positiveNumberOr("rms_norm_eps", gptOss || olmo2 || c.arch == Architecture::kPhi3 ? 1e-5
                                                    : glm4                                           ? 1.5625e-7
                                                                                                     : 1e-6);
  RopeConfig rope;
  if (gptOss && !f.has("rope_parameters") && !f.has("rope_scaling")) {
    // GptOssConfig's default: YaRN from 4096 positions, 32 times.
    rope.type = "yarn";
    rope.factor = 32.0;
    rope.originalMaxPositions = 4096;
    rope.truncate = false;
    rope.attentionFactor = yarnMscale(rope.factor, 1.0);
  }
  if (gptOss) rope.theta = 150000.0;
  const bool phi3 = c.arch == Architecture::kPhi3;
  if (phi3 || glm4) {
    // GLM-4: Glm4Config's 0.5 unless given, at the top level or in rope_parameters.
    const json* params =
        f.has("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters") : nullptr;
    c.partialRotaryFactor =
        params != nullptr && params->contains("partial_rotary_factor")
            ? f.positiveNumber(params->at("partial_rotary_factor"), "rope_parameters.partial_rotary_factor")
            : f.positiveNumberOr("partial_rotary_factor", glm4 ? 0.5 : 1.0);
    c.interleavedRotary = glm4;
    if (c.partialRotaryFactor > 1.0 || c.rotaryDim() % 2 != 0 || c.rotaryDim() == 0) {
      RP_THROW(InputError,
               "{}: partial_rotary_factor {} gives {} rotary dims of head_dim {}; expected an even number "
               "from 2 to head_dim",
               source, c.partialRotaryFactor, c.rotaryDim(), c.headDim);
    }
  }
  c.rope = parseRope(j, f, rope, c);
  c.tieWordEmbeddings = f.boolOr("tie_word_embeddings", gemma2);
  // Qwen2: q/k/v with biases, o_proj without (modeling_qwen2.py reads no attention_bias); GLM-4 the same unless
  // attention_bias is false; Mistral and Phi-3: none.
  const bool qwen2 = c.arch == Architecture::kQwen2 || (glm4 && f.boolOr("attention_bias", true));
  const bool unbiased =
      c.arch == Architecture::kMistral || phi3;  // their projections take no bias whatever the file says
  c.attentionBias = qwen2 || (!unbiased && !glm4 && f.boolOr("attention_bias", gptOss));
  c.fusedQkv = phi3;
  c.fusedGateUp = phi3 || glm4;
  if (glm4) c.normPlacement = NormPlacement::kSandwich;  // GLM-4's names: model/layers.cpp
  if (olmo2) {  // Olmo2Config: post-norms only, q/k norms over the whole projections, RoPE in float32
    c.normStyle = NormStyle::kOlmo2;
    c.normPlacement = NormPlacement::kPost;
    c.qkNormFullWidth = c.rotaryInFloat32 = true;
  }
  c.attentionOutputBias = !qwen2 && c.attentionBias;
  // Only Llama's and Granite's MLPs read mlp_bias; the other families' have none.
  c.mlpBias = (c.arch == Architecture::kLlama || c.arch == Architecture::kGranite) && f.boolOr("mlp_bias", false);
  c.qkNorm = c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen3Moe;
  if (c.arch == Architecture::kQwen3Moe) c.moe = parseMoe(j, f);
  if (gptOss) {
    c.moe = parseGptOssMoe(j, f);
    c.attentionSinks = true;
  }
  parseWindows(j, f, c);
  if (c.arch == Architecture::kGranite) {  // GraniteConfig's defaults: all 1, the attention scale too
    c.embeddingMultiplier = f.positiveNumberOr("embedding_multiplier", 1.0);
    c.residualMultiplier = f.positiveNumberOr("residual_multiplier", 1.0);
    c.logitsScaling = f.positiveNumberOr("logits_scaling", 1.0);
    c.attentionScale = f.positiveNumberOr("attention_multiplier", 1.0);
  }
  if (gemma2) parseGemma2(j, f, c);
  checkQuantization(j, f, c.arch);
  c.bosTokenId = f.tokenIdOr("bos_token_id");
  c.eosTokenId = f.tokenIdOr("eos_token_id");
  // The config classes' defaults where the key is absent: Gemma2Config's 0, Phi3Config's 32000, Olmo2Config's 1,
  // Glm4Config's 151329, else none.
  c.padTokenId = j.contains("pad_token_id") ? f.tokenIdOr("pad_token_id")
                 : gemma2                   ? 0
                 : phi3                     ? 32000
                 : olmo2                    ? 1
                 : glm4                     ? 151329
                                            : -1;
  if (c.padTokenId < 0 || c.padTokenId >= c.vocabSize) c.padTokenId = -1;
  c.initializerRange = f.positiveNumberOr("initializer_range", 0.02);
  c.storedDtype = f.stringOr("torch_dtype", f.stringOr("dtype", "float32"));

  if (!gemma2) {
    const std::string act = f.stringOr("hidden_act", "silu");
    if (act != "silu") RP_THROW(InputError, "{}: hidden_act '{}' is not supported (supported: silu)", source, act);
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
