// The in-process pipeline matrix's model families (test_pipeline_inproc.cpp): patches to the untied TinyStories'
// config.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rp::test {

// The untied TinyStories' config.json made another family, each with what sets it apart:
//   qwen3_moe      layer 0 sparse (4 experts, top 2), layer 1 dense;
//   qwen3_moe_aux  both layers sparse, with the load-balancing loss (coefficient 0.1);
//   gpt_oss        sinks, layer 0 sliding (window 8), clamped experts;
//   mistral        head_dim 32 (not hidden / heads = 16), a window of 8 on both layers;
//   qwen2_window   q/k/v biases, layer 1 sliding (window 8: max_window_layers 1);
//   granite        Granite 3.1's multipliers (embedding x12, sublayers x0.22, scores x1/128, logits / 16);
//   gemma2         four (1 + w) norms a layer, GeGLU, layer 0 sliding (window 8), scores and logits soft-capped;
//   gemma3         Gemma 2's layers without soft-caps, (1 + w) q/k norms per head, layer 0 sliding (window 8) with
//                  its own RoPE base, layer 1 full with linear scaling;
//   qwen3_5        layer 0 Gated DeltaNet (two q/k heads, four value heads), layer 1 full attention with its output
//                  gate, RoPE on a quarter of each head;
//   phi3           fused qkv_proj and gate_up_proj, RoPE on half of each head, LongRoPE past 16 positions (the
//                  rows' 32 take the long factors), a window of 12;
//   olmo2          norms on the sublayers' outputs only, q/k norms over the whole projections, RoPE in float32;
//   glm4           pre- and post-sublayer norms, fused gate_up_proj, q/k/v biases, RoPE on interleaved pairs of
//                  half of each head.
nlohmann::json familyPatch(const std::string& family);

}  // namespace rp::test
