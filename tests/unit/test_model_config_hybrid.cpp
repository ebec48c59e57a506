// The hybrid families' config.json as transformers' config classes read them: Gemma 3's two RoPE contexts and
// Qwen3.5's linear-attention layers, and the text_config of their multimodal checkpoints.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model_config_error.h"

namespace rp::model {
namespace {

using nlohmann::json;

// Gemma 3 as Gemma3TextConfig reads it (expectations: its defaults, and the fields released configs carry): the
// 1B's form (rope_theta, rope_local_base_freq, sliding_window_pattern), transformers 5's rope_parameters per layer
// type, and a multimodal checkpoint whose text_config names only what differs from the defaults.
TEST(ModelConfig, Gemma3TwoRopesPatternAndTheMultimodalTextConfig) {
  json j = {{"model_type", "gemma3_text"},
            {"vocab_size", 262144},
            {"hidden_size", 1152},
            {"intermediate_size", 6912},
            {"num_hidden_layers", 7},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 1},
            {"sliding_window", 512},
            {"sliding_window_pattern", 6},
            {"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"rope_scaling", nullptr},
            {"attn_logit_softcapping", nullptr},
            {"final_logit_softcapping", nullptr}};
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "gemma3_text");
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.slidingWindow, 512);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_TRUE(c.qkNorm);
  EXPECT_FALSE(c.qkNormFullWidth);
  EXPECT_EQ(c.normStyle, NormStyle::kGemma);
  EXPECT_EQ(c.normPlacement, NormPlacement::kSandwich);
  EXPECT_EQ(c.attentionSoftcap, 0.0);
  EXPECT_EQ(c.finalLogitSoftcap, 0.0);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.padTokenId, 0);
  EXPECT_EQ(c.maxPositions, 131072);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_EQ(c.rope.theta, 1e6);
  ASSERT_TRUE(c.slidingRope.has_value());
  EXPECT_EQ(c.slidingRope->theta, 1e4);
  j.erase("rope_theta"), j.erase("rope_local_base_freq"), j.erase("rope_scaling");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  c = parseModelConfig(j, "cfg.json");
  EXPECT_EQ(c.rope.type, "linear");
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.slidingRope->type, "default");
  EXPECT_EQ(c.slidingRope->theta, 1e4);
  j["use_bidirectional_attention"] = true;
  EXPECT_NE(errorOf(j).find("cfg.json: use_bidirectional_attention is true"), std::string::npos) << errorOf(j);

  const json text = {{"hidden_size", 2560},
                     {"intermediate_size", 10240},
                     {"model_type", "gemma3_text"},
                     {"num_hidden_layers", 34},
                     {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                     {"sliding_window", 1024},
                     {"final_logit_softcapping", 30.0}};
  json multimodal = {{"model_type", "gemma3"},
                     {"architectures", {"Gemma3ForConditionalGeneration"}},
                     {"torch_dtype", "bfloat16"},
                     {"text_config", text},
                     {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  c = parseModelConfig(multimodal, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kGemma3);
  EXPECT_EQ(c.vocabSize, 262208);
  EXPECT_EQ(c.numHeads, 8);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_EQ(c.numLayers, 34);
  EXPECT_EQ(c.slidingWindow, 1024);
  EXPECT_FALSE(c.sliding(5));
  EXPECT_TRUE(c.sliding(6));
  EXPECT_EQ(c.rope.type, "linear");
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.slidingRope->theta, 1e4);
  EXPECT_EQ(c.slidingRope->type, "default");
  EXPECT_EQ(c.storedDtype, "bfloat16");
  EXPECT_EQ(c.finalLogitSoftcap, 0.0) << "Gemma3ForConditionalGeneration caps no logits";
  multimodal["text_config"]["hidden_activation"] = "relu";
  EXPECT_NE(errorOf(multimodal)
                .find("cfg.json: text_config: hidden_activation 'relu' is not supported for "
                      "gemma3_text"),
            std::string::npos)
      << errorOf(multimodal);
  multimodal["text_config"] = 5;
  EXPECT_NE(errorOf(multimodal).find("cfg.json: field 'text_config' is 5, expected an object"), std::string::npos)
      << errorOf(multimodal);
}

// Qwen3.5 as Qwen3_5TextConfig reads it (expectations: its defaults): three linear-attention layers to one full
// (full_attention_interval 4) or layer_types, the linear fields' defaults, head_dim 256, RoPE on a quarter of each
// head from rope_parameters, (1 + w) norms and per-head q/k norms, the gated q_proj; a multimodal checkpoint's
// text_config with the top level's dtype.
TEST(ModelConfig, Qwen35LinearLayersAndTheMultimodalTextConfig) {
  json j = {{"model_type", "qwen3_5_text"},
            {"vocab_size", 248320},
            {"hidden_size", 1024},
            {"intermediate_size", 3584},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 2},
            {"rope_parameters",
             {{"rope_type", "default"},
              {"rope_theta", 1e7},
              {"partial_rotary_factor", 0.25},
              {"mrope_section", {11, 11, 10}},
              {"mrope_interleaved", true}}}};
  ModelConfig c = parseModelConfig(j, "cfg.json");
  EXPECT_STREQ(architectureName(c.arch), "qwen3_5_text");
  EXPECT_EQ(c.linearLayers, (std::vector<bool>{true, true, true, false, true, true}));
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.rotaryDim(), 64);
  EXPECT_EQ(c.rope.theta, 1e7);
  EXPECT_FALSE(c.interleavedRotary);
  EXPECT_TRUE(c.gatedAttention);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_EQ(c.normStyle, NormStyle::kGemma);
  EXPECT_EQ(c.normPlacement, NormPlacement::kPre);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_EQ(c.linearAttention.convKernel, 4);
  EXPECT_EQ(c.linearAttention.keyHeadDim, 128);
  EXPECT_EQ(c.linearAttention.valueHeadDim, 128);
  EXPECT_EQ(c.linearAttention.numKeyHeads, 16);
  EXPECT_EQ(c.linearAttention.numValueHeads, 32);
  j["layer_types"] = {"full_attention",   "linear_attention", "full_attention",
                      "linear_attention", "linear_attention", "full_attention"};
  EXPECT_EQ(parseModelConfig(j, "cfg.json").linearLayers, (std::vector<bool>{false, true, false, true, true, false}));
  j["layer_types"][2] = "sliding_attention";
  EXPECT_NE(errorOf(j).find("cfg.json: layer_types[2] is \"sliding_attention\"; supported: \"full_attention\", "
                            "\"linear_attention\""),
            std::string::npos)
      << errorOf(j);
  j.erase("layer_types");
  j["linear_num_value_heads"] = 24;
  EXPECT_NE(errorOf(j).find("cfg.json: linear_num_value_heads (24) is not a multiple of linear_num_key_heads (16)"),
            std::string::npos)
      << errorOf(j);

  j.erase("linear_num_value_heads");
  j["full_attention_interval"] = 2;
  json multimodal = {{"model_type", "qwen3_5"}, {"dtype", "bfloat16"}, {"text_config", j}};
  c = parseModelConfig(multimodal, "cfg.json");
  EXPECT_EQ(c.arch, Architecture::kQwen35);
  EXPECT_EQ(c.linearLayers, (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_EQ(c.storedDtype, "bfloat16");
}

}  // namespace
}  // namespace rp::model
