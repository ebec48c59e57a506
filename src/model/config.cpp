#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/config_fields.h"

namespace rp::model {
namespace {

using config_detail::Fields;
using config_detail::parseGemma3Rope;
using config_detail::parseRope;
using config_detail::yarnMscale;

using nlohmann::json;

// The model_type values we read, in the order the documentation lists them.
constexpr std::pair<const char*, Architecture> kArchitectures[] = {
    {"llama", Architecture::kLlama},        {"mistral", Architecture::kMistral},
    {"qwen2", Architecture::kQwen2},        {"qwen3", Architecture::kQwen3},
    {"qwen3_moe", Architecture::kQwen3Moe}, {"gpt_oss", Architecture::kGptOss},
    {"granite", Architecture::kGranite},    {"gemma2", Architecture::kGemma2},
    {"gemma3_text", Architecture::kGemma3}, {"qwen3_5_text", Architecture::kQwen35},
    {"phi3", Architecture::kPhi3},          {"olmo2", Architecture::kOlmo2},
    {"glm4", Architecture::kGlm4}};

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

// layer_types: a list of "full_attention" and the family's other kind, `other` ("sliding_attention" where it has
// windows, Qwen3.5's "linear_attention"), whose layers are marked true.
void parseLayerTypes(const json& j, const Fields& f, const char* other, bool otherAllowed, std::vector<bool>& marked) {
  const json& types = j.at("layer_types");
  const auto layers = static_cast<std::int64_t>(marked.size());
  if (!types.is_array() || static_cast<std::int64_t>(types.size()) != layers) {
    RP_THROW(InputError, "{}: field 'layer_types' is {}, expected a list of {} layer types", f.source(), types.dump(),
             layers);
  }
  for (std::int64_t i = 0; i < layers; ++i) {
    if (types[i] == other && otherAllowed) {
      marked[i] = true;
    } else if (types[i] == "full_attention") {
      marked[i] = false;
    } else {
      RP_THROW(InputError, "{}: layer_types[{}] is {}; supported: \"full_attention\"{}", f.source(), i, types[i].dump(),
               otherAllowed ? fmt::format(", \"{}\"", other) : fmt::format(" (\"{}\" needs a sliding_window)", other));
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
    case Architecture::kGemma3: {  // Gemma3TextConfig: five local layers to one global, within 4096 unless given
      c.slidingWindow = windowOr4096(j, f);
      const std::int64_t pattern = f.positiveIntOr("sliding_window_pattern", 6);
      for (std::int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[i] = c.slidingWindow > 0 && (i + 1) % pattern != 0;
      break;
    }
    case Architecture::kPhi3:  // Phi3Config: a window on every layer when sliding_window is set (none unless)
      c.slidingWindow = f.positiveIntOr("sliding_window", 0);
      c.slidingLayers.assign(c.slidingLayers.size(), c.slidingWindow > 0);
      readLayerTypes = false;
      break;
    case Architecture::kQwen35:  // layer_types names its linear-attention layers (parseQwen35)
      readLayerTypes = false;
      break;
    case Architecture::kLlama:
    case Architecture::kGranite:
    case Architecture::kOlmo2:
    case Architecture::kGlm4:
      break;
  }
  if (readLayerTypes && f.has("layer_types")) {
    parseLayerTypes(j, f, "sliding_attention", c.slidingWindow > 0, c.slidingLayers);
  }
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

// Gemma 2 and 3 (their config classes' defaults where a field is absent): GeGLU, (1 + w) norms in float32 and four
// of them a layer, the embedding times sqrt(hidden) rounded to the model dtype, scores times
// query_pre_attn_scalar^-0.5; Gemma 2 soft-caps the scores and the final logits (Gemma 3 only where the config says),
// Gemma 3 normalises q and k per head and rotates its sliding layers with their own RoPE.
void parseGemma(const json& j, const Fields& f, ModelConfig& c) {
  const std::string act = f.stringOr("hidden_activation", f.stringOr("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh") {
    RP_THROW(InputError, "{}: hidden_activation '{}' is not supported for {} (supported: gelu_pytorch_tanh)",
             f.source(), act, architectureName(c.arch));
  }
  const bool gemma2 = c.arch == Architecture::kGemma2;
  c.activation = Activation::kGeluTanh;
  c.normStyle = NormStyle::kGemma;
  c.normPlacement = NormPlacement::kSandwich;
  c.embeddingMultiplier = std::sqrt(static_cast<double>(c.hiddenSize));
  c.embeddingMultiplierInModelDtype = true;
  c.attentionScale = 1.0 / std::sqrt(f.positiveNumberOr("query_pre_attn_scalar", 256.0));
  c.attentionSoftcap = softcapOr(j, f, "attn_logit_softcapping", gemma2 ? 50.0 : 0.0);
  c.finalLogitSoftcap = softcapOr(j, f, "final_logit_softcapping", gemma2 ? 30.0 : 0.0);
  if (gemma2) return;
  c.qkNorm = true;
  if (f.boolOr("use_bidirectional_attention", false)) {
    RP_THROW(InputError,
             "{}: use_bidirectional_attention is true (an embedding model such as EmbeddingGemma); supported: "
             "causal language models",
             f.source());
  }
}

// Gemma3TextConfig's defaults for the fields a released config may leave out (the multimodal checkpoints'
// text_config names only those that differ).
json withGemma3TextDefaults(json j) {
  const json defaults = {{"vocab_size", 262208},
                         {"hidden_size", 2304},
                         {"intermediate_size", 9216},
                         {"num_hidden_layers", 26},
                         {"num_attention_heads", 8},
                         {"num_key_value_heads", 4},
                         {"head_dim", 256},
                         {"max_position_embeddings", 131072},
                         {"rms_norm_eps", 1e-6},
                         {"pad_token_id", 0},
                         {"eos_token_id", 1},
                         {"bos_token_id", 2},
                         {"tie_word_embeddings", true}};
  for (const auto& [key, value] : defaults.items()) {
    if (!j.contains(key)) j[key] = value;
  }
  return j;
}

// A multimodal checkpoint (Gemma 3's Gemma3ForConditionalGeneration, Qwen3.5's Qwen3_5ForConditionalGeneration):
// its text model, `textType`, whose fields are text_config's, the checkpoint-wide ones (dtype, quantization, tying)
// from the top level.
json multimodalTextConfig(const json& j, const std::string& source, const char* textType) {
  json text = j.contains("text_config") && !j.at("text_config").is_null() ? j.at("text_config") : json::object();
  if (!text.is_object()) {
    RP_THROW(InputError, "{}: field 'text_config' is {}, expected an object (the model's text model)", source,
             text.dump());
  }
  for (const char* key : {"torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"}) {
    if (j.contains(key)) text[key] = j.at(key);
  }
  text["model_type"] = textType;
  return text;
}

// Qwen3.5 (Qwen3_5TextConfig's defaults where a field is absent): Gated DeltaNet layers, three to each full-attention
// layer (full_attention_interval 4, or layer_types), whose q_proj also yields an output gate; (1 + w) norms, q/k
// norms per head; RoPE on the first quarter of each head (the text's positions on all three mRoPE sections, which
// makes mrope_section and mrope_interleaved change nothing).
void parseQwen35(const json& j, const Fields& f, ModelConfig& c) {
  c.normStyle = NormStyle::kGemma;
  c.qkNorm = c.gatedAttention = true;
  LinearAttentionConfig& l = c.linearAttention;
  l.convKernel = f.positiveIntOr("linear_conv_kernel_dim", l.convKernel);
  l.keyHeadDim = f.positiveIntOr("linear_key_head_dim", l.keyHeadDim);
  l.valueHeadDim = f.positiveIntOr("linear_value_head_dim", l.valueHeadDim);
  l.numKeyHeads = f.positiveIntOr("linear_num_key_heads", l.numKeyHeads);
  l.numValueHeads = f.positiveIntOr("linear_num_value_heads", l.numValueHeads);
  if (l.numValueHeads % l.numKeyHeads != 0) {
    RP_THROW(InputError, "{}: linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})", f.source(),
             l.numValueHeads, l.numKeyHeads);
  }
  c.linearLayers.assign(static_cast<std::size_t>(c.numLayers), false);
  if (f.has("layer_types")) {
    parseLayerTypes(j, f, "linear_attention", true, c.linearLayers);
    return;
  }
  const std::int64_t interval = f.positiveIntOr("full_attention_interval", 4);
  for (std::int64_t i = 0; i < c.numLayers; ++i) c.linearLayers[i] = (i + 1) % interval != 0;
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
  for (const auto& [name, arch] : kArchitectures) {
    list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", name);
    if (arch == Architecture::kGemma3) list += ", \"gemma3\" (its text model)";
    if (arch == Architecture::kQwen35) list += ", \"qwen3_5\" (its text model)";
  }
  return list;
}

ModelConfig parseModelConfig(const json& given, const std::string& source) {
  if (!given.is_object()) RP_THROW(InputError, "{}: expected a JSON object", source);
  if (given.value("model_type", json()) == "gemma3") {
    ModelConfig c = parseModelConfig(multimodalTextConfig(given, source, "gemma3_text"), source + ": text_config");
    c.finalLogitSoftcap = 0.0;  // Gemma3ForConditionalGeneration caps no logits, whatever text_config says
    return c;
  }
  if (given.value("model_type", json()) == "qwen3_5") {
    return parseModelConfig(multimodalTextConfig(given, source, "qwen3_5_text"), source + ": text_config");
  }
  json filled;
  const json& j = given.value("model_type", json()) == "gemma3_text" ? (filled = withGemma3TextDefaults(given)) : given;
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
  const bool gemma = gemma2 || c.arch == Architecture::kGemma3, qwen35 = c.arch == Architecture::kQwen35;
  if (c.arch != Architecture::kGptOss && c.arch != Architecture::kQwen3 && c.arch != Architecture::kQwen3Moe &&
      !gemma && !qwen35 && !f.has("head_dim") && c.hiddenSize % c.numHeads != 0) {
    RP_THROW(InputError, "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is absent",
             source, c.hiddenSize, c.numHeads);
  }
  c.headDim = f.positiveIntOr("head_dim", gptOss             ? 64
                                          : gemma2 || qwen35 ? 256
                                          : glm4             ? 128
                                                             : c.hiddenSize / c.numHeads);
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
  if (phi3 || glm4 || qwen35) {
    // GLM-4: Glm4Config's 0.5 unless given, at the top level or in rope_parameters; Qwen3.5: 0.25.
    const json* params =
        f.has("rope_parameters") && j.at("rope_parameters").is_object() ? &j.at("rope_parameters") : nullptr;
    c.partialRotaryFactor =
        params != nullptr && params->contains("partial_rotary_factor")
            ? f.positiveNumber(params->at("partial_rotary_factor"), "rope_parameters.partial_rotary_factor")
            : f.positiveNumberOr("partial_rotary_factor", glm4     ? 0.5
                                                          : qwen35 ? 0.25
                                                                   : 1.0);
    c.interleavedRotary = glm4;
    if (c.partialRotaryFactor > 1.0 || c.rotaryDim() % 2 != 0 || c.rotaryDim() == 0) {
      RP_THROW(InputError,
               "{}: partial_rotary_factor {} gives {} rotary dims of head_dim {}; expected an even number "
               "from 2 to head_dim",
               source, c.partialRotaryFactor, c.rotaryDim(), c.headDim);
    }
  }
  c.rope = parseRope(j, f, rope, c);
  if (c.arch == Architecture::kGemma3) parseGemma3Rope(j, f, c);
  c.tieWordEmbeddings = f.boolOr("tie_word_embeddings", gemma);
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
  if (gemma) parseGemma(j, f, c);
  if (qwen35) parseQwen35(j, f, c);
  checkQuantization(j, f, c.arch);
  c.bosTokenId = f.tokenIdOr("bos_token_id");
  c.eosTokenId = f.tokenIdOr("eos_token_id");
  // The config classes' defaults where the key is absent: Gemma2Config's (and Gemma3TextConfig's) 0, Phi3Config's
  // 32000, Olmo2Config's 1, Glm4Config's 151329, else none.
  c.padTokenId = j.contains("pad_token_id") ? f.tokenIdOr("pad_token_id")
                 : gemma                    ? 0
                 : phi3                     ? 32000
                 : olmo2                    ? 1
                 : glm4                     ? 151329
                                            : -1;
  if (c.padTokenId < 0 || c.padTokenId >= c.vocabSize) c.padTokenId = -1;
  c.initializerRange = f.positiveNumberOr("initializer_range", 0.02);
  c.storedDtype = f.stringOr("torch_dtype", f.stringOr("dtype", "float32"));

  if (!gemma) {
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
