#include "family_patch.h"

#include <vector>

namespace rp::test {

nlohmann::json familyPatch(const std::string& family) {
  if (family == "qwen3_moe" || family == "qwen3_moe_aux") {
    const bool aux = family == "qwen3_moe_aux";
    return {{"model_type", "qwen3_moe"},   {"num_experts", 4},
            {"num_experts_per_tok", 2},    {"moe_intermediate_size", 64},
            {"norm_topk_prob", true},      {"mlp_only_layers", aux ? std::vector<int>{} : std::vector<int>{1}},
            {"output_router_logits", aux}, {"router_aux_loss_coef", 0.1}};
  }
  if (family == "gpt_oss") {
    return {{"model_type", "gpt_oss"},      {"head_dim", 16},
            {"num_local_experts", 4},       {"num_experts_per_tok", 2},
            {"intermediate_size", 64},      {"sliding_window", 8},
            {"swiglu_limit", 0.1},  // random weights: the clamps bite
            {"output_router_logits", true}, {"router_aux_loss_coef", 0.1}};
  }
  if (family == "mistral") return {{"model_type", "mistral"}, {"head_dim", 32}, {"sliding_window", 8}};
  if (family == "qwen2_window") {
    return {{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 1}};
  }
  if (family == "granite") {
    return {{"model_type", "granite"},
            {"embedding_multiplier", 12.0},
            {"residual_multiplier", 0.22},
            {"attention_multiplier", 0.0078125},
            {"logits_scaling", 16.0}};
  }
  if (family == "gemma2") {
    return {{"model_type", "gemma2"},
            {"head_dim", 32},
            {"query_pre_attn_scalar", 24},
            {"sliding_window", 8},
            {"attn_logit_softcapping", 2.0},
            {"final_logit_softcapping", 3.0},
            {"hidden_activation", "gelu_pytorch_tanh"}};
  }
  if (family == "gemma3") {
    return {{"model_type", "gemma3_text"},
            {"head_dim", 32},
            {"query_pre_attn_scalar", 24},
            {"sliding_window", 8},
            {"sliding_window_pattern", 2},
            {"rope_local_base_freq", 100.0},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}};
  }
  if (family == "qwen3_5") {
    return {
        {"model_type", "qwen3_5_text"}, {"head_dim", 32},
        {"full_attention_interval", 2}, {"linear_key_head_dim", 16},
        {"linear_value_head_dim", 16},  {"linear_num_key_heads", 2},
        {"linear_num_value_heads", 4},  {"rope_parameters", {{"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}}};
  }
  if (family == "phi3") {
    const std::vector<double> shortFactor{1.0, 1.2, 1.5, 2.0}, longFactor{1.0, 2.0, 4.0, 8.0};
    return {{"model_type", "phi3"},
            {"partial_rotary_factor", 0.5},
            {"original_max_position_embeddings", 16},
            {"max_position_embeddings", 64},
            {"sliding_window", 12},
            {"rope_scaling", {{"type", "longrope"}, {"short_factor", shortFactor}, {"long_factor", longFactor}}}};
  }
  if (family == "olmo2") return {{"model_type", "olmo2"}};
  if (family == "glm4") return {{"model_type", "glm4"}, {"head_dim", 16}, {"pad_token_id", 0}};
  return nlohmann::json::object();
}

}  // namespace rp::test
