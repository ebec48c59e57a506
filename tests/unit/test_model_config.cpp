#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/config.h"
#include "model_config_error.h"
#include "support/fixtures.h"

namespace rp::model {
namespace {

using nlohmann::json;

json llama() {
  return {{"model_type", "llama"},
          {"vocab_size", 100},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false},
          {"max_position_embeddings", 64}};
}

TEST(ModelConfig, TinyStoriesFixture) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const ModelConfig c = loadModelConfig(*fixtures + "/models/tinystories-656k");
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.numLayers, 2);
  EXPECT_EQ(c.hiddenSize, 128);
  EXPECT_EQ(c.numHeads, 8);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.intermediateSize, 384);
  EXPECT_EQ(c.vocabSize, 2048);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e4);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-6);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.bosTokenId, 1);
  EXPECT_EQ(c.eosTokenId, 2);
}

TEST(ModelConfig, Qwen3HeadDimAndV5RopeParameters) {
  json j = llama();
  j["model_type"] = "qwen3";
  j["head_dim"] = 32;
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  j["eos_token_id"] = {7, 8};
  const ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_EQ(c.headDim, 32);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.eosTokenId, 7);
}

json qwen3Moe() {
  json j = llama();
  j["model_type"] = "qwen3_moe";
  j["head_dim"] = 16;
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  return j;
}

TEST(ModelConfig, Qwen3MoeFieldsAndTransformersDefaults) {
  json j = qwen3Moe();
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_EQ(c.moe.numExperts, 8);
  EXPECT_EQ(c.moe.expertsPerToken, 2);
  EXPECT_EQ(c.moe.expertIntermediateSize, 32);
  EXPECT_FALSE(c.moe.normTopkProb);  // Qwen3MoeConfig's defaults
  EXPECT_DOUBLE_EQ(c.moe.routerAuxLossCoef, 0.001);
  EXPECT_FALSE(c.moe.outputRouterLogits);
  EXPECT_FALSE(c.moe.auxLoss());  // transformers adds the loss only with output_router_logits
  EXPECT_TRUE(c.moe.sparse(0) && c.moe.sparse(1));
  EXPECT_FALSE(ModelConfig{}.moe.sparse(0));  // dense models

  // transformers 5 saves num_local_experts; decoder_sparse_step and mlp_only_layers both make dense layers.
  j.erase("num_experts");
  j["num_local_experts"] = 4;
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["output_router_logits"] = true;
  j["norm_topk_prob"] = true;
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.moe.numExperts, 4);
  EXPECT_TRUE(c.moe.normTopkProb);
  EXPECT_TRUE(c.moe.auxLoss());
  std::vector<bool> sparse;
  for (int l = 0; l < 6; ++l) sparse.push_back(c.moe.sparse(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(ModelConfig, Qwen3MoeErrorsNameTheField) {
  json j = qwen3Moe();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(errorOf(j).find("cfg.json: num_experts_per_tok (9) exceeds the number of experts (8)"), std::string::npos)
      << errorOf(j);
  j = qwen3Moe();
  j.erase("moe_intermediate_size");
  EXPECT_NE(errorOf(j).find("cfg.json: field 'moe_intermediate_size' is missing"), std::string::npos) << errorOf(j);
  j = qwen3Moe();
  j.erase("num_experts");
  EXPECT_NE(errorOf(j).find("field 'num_local_experts' is missing"), std::string::npos) << errorOf(j);
  j = qwen3Moe();
  j["mlp_only_layers"] = {1, -2};
  EXPECT_NE(errorOf(j).find("'mlp_only_layers' holds -2"), std::string::npos) << errorOf(j);
  j = qwen3Moe();
  j["router_aux_loss_coef"] = "high";
  EXPECT_NE(errorOf(j).find("'router_aux_loss_coef' is \"high\""), std::string::npos) << errorOf(j);
}

json gptOss() {
  return {{"model_type", "gpt_oss"}, {"vocab_size", 100},        {"hidden_size", 64},       {"intermediate_size", 32},
          {"num_hidden_layers", 4},  {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}

TEST(ModelConfig, GptOssFieldsAndTransformersDefaults) {
  json j = gptOss();
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kGptOss);
  EXPECT_STREQ(architectureName(c.arch), "gpt_oss");
  // GptOssConfig's defaults.
  EXPECT_EQ(c.headDim, 64);
  EXPECT_TRUE(c.attentionBias);
  EXPECT_TRUE(c.attentionSinks);
  EXPECT_FALSE(c.qkNorm);
  EXPECT_DOUBLE_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.slidingWindow, 128);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 150000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.originalMaxPositions, 4096);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_DOUBLE_EQ(c.rope.attentionFactor, 0.1 * std::log(32.0) + 1.0);
  EXPECT_EQ(c.moe.kind, MoeKind::kGptOss);
  EXPECT_EQ(c.moe.numExperts, 128);
  EXPECT_EQ(c.moe.expertsPerToken, 4);
  EXPECT_EQ(c.moe.expertIntermediateSize, 32);
  EXPECT_DOUBLE_EQ(c.moe.swigluLimit, 7.0);
  EXPECT_DOUBLE_EQ(c.moe.swigluAlpha, 1.702);
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(c.moe.sparse(l)) << l;

  // As published (gpt-oss-20b): explicit layer types, old-form rope scaling, MXFP4 experts.
  j["num_local_experts"] = 32;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  j["rope_theta"] = 10000.0;
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 8.0},
                       {"original_max_position_embeddings", 64},
                       {"mscale", 2.0},
                       {"mscale_all_dim", 1.0}};
  j["quantization_config"] = {{"quant_method", "mxfp4"}};
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.moe.numExperts, 32);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{false, true, false, false}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_DOUBLE_EQ(c.rope.attentionFactor, (0.2 * std::log(8.0) + 1.0) / (0.1 * std::log(8.0) + 1.0));
}

TEST(ModelConfig, GptOssErrorsNameTheField) {
  json j = gptOss();
  j["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  EXPECT_NE(errorOf(j).find("layer_types[1] is \"chunked_attention\""), std::string::npos) << errorOf(j);
  j["layer_types"] = {"full_attention"};
  EXPECT_NE(errorOf(j).find("expected a list of 4 layer types"), std::string::npos) << errorOf(j);
  j = gptOss();
  j["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_NE(errorOf(j).find("quant_method 'fp8' is not supported"), std::string::npos) << errorOf(j);
  j = gptOss();
  j["swiglu_limit"] = -1;
  EXPECT_NE(errorOf(j).find("'swiglu_limit' is -1"), std::string::npos) << errorOf(j);
  j = gptOss();
  j["num_experts_per_tok"] = 200;
  EXPECT_NE(errorOf(j).find("num_experts_per_tok (200) exceeds the number of experts (128)"), std::string::npos)
      << errorOf(j);
}

TEST(ModelConfig, Llama3RopeScalingOldForm) {
  json j = llama();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.originalMaxPositions, 8192);
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  json j = llama();
  j["model_type"] = "bloom";
  EXPECT_NE(errorOf(j).find("cfg.json: model_type \"bloom\" is not supported (supported: \"llama\", \"mistral\", "),
            std::string::npos)
      << errorOf(j);

  j = llama();
  j.erase("hidden_size");
  EXPECT_NE(errorOf(j).find("cfg.json: field 'hidden_size' is missing"), std::string::npos) << errorOf(j);

  j = llama();
  j["num_hidden_layers"] = -2;
  EXPECT_NE(errorOf(j).find("'num_hidden_layers' is -2, expected a positive integer"), std::string::npos);

  j = llama();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(errorOf(j).find("not a multiple of num_key_value_heads (3)"), std::string::npos) << errorOf(j);

  j = llama();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  EXPECT_NE(errorOf(j).find("rope_type 'dynamic' is not supported"), std::string::npos) << errorOf(j);

  j = llama();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(errorOf(j).find("field 'original_max_position_embeddings' is missing"), std::string::npos) << errorOf(j);

  j = llama();
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(errorOf(j).find("layer_types[1] is \"sliding_attention\"; supported: \"full_attention\""),
            std::string::npos)
      << errorOf(j);

  // bitsandbytes: 4-bit NF4 only (model/nf4.h), as transformers writes the config.
  j = llama();
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
  EXPECT_NE(errorOf(j).find("quantization_config is bitsandbytes 8-bit (load_in_8bit); supported: 4-bit NF4"),
            std::string::npos)
      << errorOf(j);
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "fp4"}};
  EXPECT_NE(errorOf(j).find("quantization_config.bnb_4bit_quant_type is \"fp4\"; supported: \"nf4\""),
            std::string::npos)
      << errorOf(j);
  j["quantization_config"]["bnb_4bit_quant_type"] = "nf4";
  EXPECT_EQ(errorOf(j), "no error") << "a bitsandbytes NF4 checkpoint loads, dequantized";

  j = llama();
  j["hidden_act"] = "gelu";
  EXPECT_NE(errorOf(j).find("hidden_act 'gelu'"), std::string::npos) << errorOf(j);

  j = llama();
  j.erase("model_type");
  EXPECT_NE(errorOf(j).find("'model_type' is missing"), std::string::npos) << errorOf(j);
}

// Granite's multipliers, and GraniteConfig's defaults (all 1: the attention scale too, not 1 / sqrt(head_dim)).
TEST(ModelConfig, GraniteMultipliersAndTheirDefaults) {
  json j = llama();
  j["model_type"] = "granite";
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kGranite);
  EXPECT_STREQ(architectureName(c.arch), "granite");
  EXPECT_EQ(c.embeddingMultiplier, 1.0);
  EXPECT_EQ(c.residualMultiplier, 1.0);
  EXPECT_EQ(c.logitsScaling, 1.0);
  EXPECT_EQ(c.attentionScale, 1.0);
  j.update({{"embedding_multiplier", 12.0},
            {"residual_multiplier", 0.22},
            {"attention_multiplier", 0.0078125},
            {"logits_scaling", 16}});
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.embeddingMultiplier, 12.0);
  EXPECT_EQ(c.residualMultiplier, 0.22);
  EXPECT_EQ(c.logitsScaling, 16.0);
  EXPECT_EQ(c.attentionScale, 0.0078125);
  j["logits_scaling"] = 0;
  EXPECT_NE(errorOf(j).find("cfg.json: field 'logits_scaling' is 0, expected a positive number"), std::string::npos)
      << errorOf(j);
  j = llama();
  j["logits_scaling"] = 16;  // not Granite: transformers' Llama ignores it
  EXPECT_EQ(parseModelConfig(j, "cfg.json").logitsScaling, 1.0);
  EXPECT_EQ(parseModelConfig(j, "cfg.json").attentionScale, 0.0);
}

// Gemma 2 as Gemma2Config reads it (the expectations are its defaults for these fields): head_dim 256, the score
// scale from query_pre_attn_scalar (256), layers 0, 2, ... sliding within 4096, tied, both soft-caps (50, 30;
// null: none), GeGLU, Gemma's norms and four of them a layer, the embedding times sqrt(hidden).
TEST(ModelConfig, Gemma2FieldsAndTransformersDefaults) {
  json j = llama();
  j["model_type"] = "gemma2";
  j["num_hidden_layers"] = 3;
  j.erase("tie_word_embeddings");
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "gemma2");
  EXPECT_EQ(c.headDim, 256);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 16.0);
  EXPECT_EQ(c.slidingWindow, 4096);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.attentionSoftcap, 50.0);
  EXPECT_EQ(c.finalLogitSoftcap, 30.0);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_EQ(c.normStyle, NormStyle::kGemma);
  EXPECT_EQ(c.normPlacement, NormPlacement::kSandwich);
  EXPECT_TRUE(c.embeddingMultiplierInModelDtype);
  EXPECT_DOUBLE_EQ(c.embeddingMultiplier, 8.0);  // sqrt(64)
  j.update({{"head_dim", 128},
            {"query_pre_attn_scalar", 144},
            {"final_logit_softcapping", nullptr},
            {"hidden_act", "silu"},
            {"hidden_activation", "gelu_pytorch_tanh"}});
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.headDim, 128);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 12.0);
  EXPECT_EQ(c.finalLogitSoftcap, 0.0);
  j["hidden_activation"] = "relu";
  EXPECT_NE(errorOf(j).find("cfg.json: hidden_activation 'relu' is not supported for gemma2 (supported: "
                            "gelu_pytorch_tanh)"),
            std::string::npos)
      << errorOf(j);
}

// Phi-3 as Phi3Config reads it: fused projections, no biases whatever the file says, rms_norm_eps 1e-5,
// pad_token_id 32000 (the embedding's padding_idx where it is a row), partial rotary, longrope from rope_scaling
// ("su" and "yarn" name it too) with the factor and attention factor from the context lengths; the window on
// every layer. Expected values: Phi-4-mini's config.json fields, and transformers' formula
// sqrt(1 + ln(32) / ln(4096)) = 1.1902380714.
TEST(ModelConfig, Phi3FieldsLongRopeAndTransformersDefaults) {
  json j = llama();
  j.update({{"model_type", "phi3"},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"hidden_size", 64},
            {"vocab_size", 40000},
            {"attention_bias", true},
            {"partial_rotary_factor", 0.75},
            {"max_position_embeddings", 131072},
            {"original_max_position_embeddings", 4096},
            {"sliding_window", 2047}});
  j.erase("rms_norm_eps");
  const std::vector<double> shortFactor{1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, longFactor{1.0, 1.5, 2.0, 4.0, 8.0, 16.0};
  j["rope_scaling"] = {{"type", "su"}, {"short_factor", shortFactor}, {"long_factor", longFactor}};
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "phi3");
  EXPECT_TRUE(c.fusedQkv && c.fusedGateUp);
  EXPECT_FALSE(c.attentionBias || c.attentionOutputBias || c.mlpBias);
  EXPECT_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.padTokenId, 32000);
  EXPECT_EQ(c.rotaryDim(), 12);
  EXPECT_EQ(c.rope.type, "longrope");
  EXPECT_EQ(c.rope.originalMaxPositions, 4096);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_NEAR(c.rope.attentionFactor, 1.1902380714, 1e-9);
  EXPECT_EQ(c.rope.longFactor, longFactor);
  EXPECT_EQ(c.slidingWindow, 2047);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, true}));
  j["rope_scaling"]["long_factor"] = std::vector<double>{1.0, 2.0};
  EXPECT_NE(errorOf(j).find("cfg.json: field 'long_factor' is [1.0,2.0], expected a list of 6 numbers"),
            std::string::npos)
      << errorOf(j);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(
      errorOf(j).find("rope_scaling.rope_type 'dynamic' is not supported for phi3 (supported: default, longrope)"),
      std::string::npos)
      << errorOf(j);
  j.erase("rope_scaling");
  j["partial_rotary_factor"] = 0.3;  // 4.8 dims: 4, fine; 0.1: 1.6 -> 1, odd
  EXPECT_EQ(parseModelConfig(j, "cfg.json").rotaryDim(), 4);
  j["partial_rotary_factor"] = 0.1;
  EXPECT_NE(errorOf(j).find("partial_rotary_factor 0.1 gives 1 rotary dims of head_dim 16"), std::string::npos)
      << errorOf(j);
  j["partial_rotary_factor"] = 1.0;
  j["vocab_size"] = 100;  // the default pad 32000 is no row of it
  EXPECT_EQ(parseModelConfig(j, "cfg.json").padTokenId, -1);
}

// OLMo 2 as Olmo2Config reads it: norms after the sublayers only, in its style, q/k norms over the whole
// projections, RoPE in float32, rms_norm_eps 1e-5, pad_token_id 1.
TEST(ModelConfig, Olmo2NormsAndTransformersDefaults) {
  json j = llama();
  j["model_type"] = "olmo2";
  j.erase("rms_norm_eps");
  const ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "olmo2");
  EXPECT_EQ(c.normStyle, NormStyle::kOlmo2);
  EXPECT_EQ(c.normPlacement, NormPlacement::kPost);
  EXPECT_TRUE(c.qkNormFullWidth && c.rotaryInFloat32);
  EXPECT_FALSE(c.qkNorm);
  EXPECT_EQ(c.rmsNormEps, 1e-5);
  EXPECT_EQ(c.padTokenId, 1);
}

// GLM-4 as Glm4Config reads it: head_dim 128, partial rotary 0.5 (top level or in rope_parameters) on
// interleaved pairs, q/k/v biases without o_proj's, fused gate_up_proj only, norms before and after each sublayer,
// rms_norm_eps 1.5625e-7, pad_token_id 151329.
TEST(ModelConfig, Glm4FieldsAndTransformersDefaults) {
  json j = llama();
  j["model_type"] = "glm4";
  j["vocab_size"] = 151552;
  j.erase("rms_norm_eps");
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "glm4");
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.rotaryDim(), 64);
  EXPECT_TRUE(c.interleavedRotary);
  EXPECT_TRUE(c.attentionBias);
  EXPECT_FALSE(c.attentionOutputBias || c.mlpBias || c.fusedQkv);
  EXPECT_TRUE(c.fusedGateUp);
  EXPECT_EQ(c.normPlacement, NormPlacement::kSandwich);
  EXPECT_EQ(c.normStyle, NormStyle::kLlama);
  EXPECT_EQ(c.rmsNormEps, 1.5625e-7);
  EXPECT_EQ(c.padTokenId, 151329);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}};
  j["attention_bias"] = false;
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.rotaryDim(), 32);
  EXPECT_FALSE(c.attentionBias);
}

// Which layers slide and how far, as each transformers config class reads its config.json (the expectations
// are what MistralConfig, Qwen2Config, Qwen3Config and Qwen3MoeConfig give for the same fields).
TEST(ModelConfig, SlidingWindowsAsEachConfigClassReadsThem) {
  const auto windows = [](const json& j) {
    const ModelConfig c = parseModelConfig(j, "cfg.json");
    std::string layers;
    for (std::int64_t l = 0; l < c.numLayers; ++l) layers += c.sliding(l) ? 'S' : 'F';
    return std::to_string(c.slidingWindow) + " " + layers;
  };
  json j = llama();
  j["num_hidden_layers"] = 3;
  j["model_type"] = "mistral";
  EXPECT_EQ(windows(j), "4096 SSS") << "MistralConfig's default window";
  j["sliding_window"] = nullptr;
  EXPECT_EQ(windows(j), "0 FFF") << "Mistral v0.2 on, Nemo";
  j["sliding_window"] = 8;
  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  EXPECT_EQ(windows(j), "8 SSS") << "Mistral ignores layer_types";
  // Mistral Nemo's explicit head_dim (128 with hidden 5120 and 32 heads); no biases whatever the file says.
  j["hidden_size"] = 5120, j["num_attention_heads"] = 32, j["num_key_value_heads"] = 8, j["head_dim"] = 128;
  j["attention_bias"] = true, j["mlp_bias"] = true;
  const ModelConfig nemo = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(nemo.headDim, 128);
  EXPECT_FALSE(nemo.attentionBias || nemo.attentionOutputBias || nemo.mlpBias);

  j = llama();
  j["num_hidden_layers"] = 3;
  j["model_type"] = "qwen2";
  j["sliding_window"] = 8;
  EXPECT_EQ(windows(j), "0 FFF") << "no use_sliding_window";
  j["use_sliding_window"] = true;
  EXPECT_EQ(windows(j), "8 FFF") << "max_window_layers defaults to 28";
  j["max_window_layers"] = 1;
  EXPECT_EQ(windows(j), "8 FSS");
  j["model_type"] = "qwen3";
  j["max_window_layers"] = 2;
  EXPECT_EQ(windows(j), "8 FFS");
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  EXPECT_EQ(windows(j), "8 SFF") << "layer_types over max_window_layers";
  j.erase("layer_types");
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 4, j["num_experts_per_tok"] = 2, j["moe_intermediate_size"] = 32;
  EXPECT_EQ(windows(j), "8 SSS") << "Qwen3-MoE slides on every layer";

  j = llama();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["sliding_window"] = nullptr;
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(errorOf(j).find("layer_types[1] is \"sliding_attention\"; supported: \"full_attention\" "
                            "(\"sliding_attention\" needs a sliding_window)"),
            std::string::npos)
      << errorOf(j);
  j.erase("layer_types");
  j["sliding_window"] = 8;
  j["max_window_layers"] = -1;
  EXPECT_NE(errorOf(j).find("cfg.json: field 'max_window_layers' is -1, expected an integer >= 0"), std::string::npos)
      << errorOf(j);
}

TEST(ModelConfig, UnreadableAndInvalidFiles) {
  const std::string dir = test::scratchDir();
  try {
    loadModelConfig(dir);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/config.json: cannot open"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"llama\",";
  try {
    loadModelConfig(dir);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: not valid JSON"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rp::model
