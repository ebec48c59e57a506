// The model architecture as described by a Hugging Face config.json (the model_types of docs/model.md).
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rp::model {

enum class Architecture {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kGptOss,
  kGranite,
  kGemma2,
  kGemma3,
  kQwen35,
  kPhi3,
  kOlmo2,
  kGlm4
};

// How an RMSNorm applies its weight to the float32-normalised input: Llama's w * x.to(dtype); Gemma's
// (x * (1 + w)) in float32, cast once (w stored as an offset from one, zero at init); OLMo 2's (w * x) in float32,
// cast once.
enum class NormStyle { kLlama, kGemma, kOlmo2 };
// Where a decoder layer's norms sit: before each sublayer (Llama); before and after (Gemma, GLM-4: norms on the
// sublayers' outputs too); after only (OLMo 2: no pre-norms).
enum class NormPlacement { kPre, kSandwich, kPost };

// The MLP's (and a dense layer's) gate activation: SiLU (SwiGLU), or GELU's tanh approximation (Gemma's GeGLU,
// transformers' gelu_pytorch_tanh).
enum class Activation { kSilu, kGeluTanh };

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";              // default | linear | llama3 | yarn | longrope
  double factor = 1.0;                       // linear, llama3, yarn
  double lowFreqFactor = 1.0;                // llama3
  double highFreqFactor = 4.0;               // llama3
  std::int64_t originalMaxPositions = 8192;  // llama3, yarn, longrope
  double betaFast = 32.0;                    // yarn: the ramp between extrapolated and interpolated frequencies
  double betaSlow = 1.0;                     // yarn
  bool truncate = true;                      // yarn: round the ramp's ends to whole dimensions
  double attentionFactor = 1.0;              // yarn, longrope: cos and sin are scaled by it (from factor unless given)
  // longrope (Phi-3): per rotary frequency, the divisors of positions up to originalMaxPositions and past them.
  std::vector<double> shortFactor, longFactor;
};

// Mixture of experts (docs/moe.md): which decoder layers route each token to `expertsPerToken` of
// `numExperts` experts, and the load-balancing loss transformers adds to the training loss.
//   kQwen3: softmax over all experts then top-k; SwiGLU experts without biases.
//   kGptOss: top-k of the logits (router with a bias) then softmax over the k; experts with biases and
//            the clamped GLU (up + 1) * gate * sigmoid(alpha * gate), gate <= limit, |up| <= limit.
enum class MoeKind { kQwen3, kGptOss };
struct MoeConfig {
  MoeKind kind = MoeKind::kQwen3;
  std::int64_t numExperts = 0;  // 0: a dense model
  std::int64_t expertsPerToken = 0;
  std::int64_t expertIntermediateSize = 0;
  bool normTopkProb = false;                // renormalise the top-k probabilities to sum to one
  std::int64_t sparseStep = 1;              // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0
  std::vector<std::int64_t> mlpOnlyLayers;  // dense layers regardless of the step
  double routerAuxLossCoef = 0.0;
  bool outputRouterLogits = false;  // transformers adds the auxiliary loss only when this is true
  double swigluLimit = 7.0;         // kGptOss
  double swigluAlpha = 1.702;       // kGptOss

  // Whether decoder layer `layer` is a sparse (expert) layer.
  bool sparse(std::int64_t layer) const;
  // Whether training adds the load-balancing loss.
  bool auxLoss() const { return numExperts > 0 && outputRouterLogits && routerAuxLossCoef != 0.0; }
};

// Qwen3.5's linear-attention layers (Gated DeltaNet, model/linear_attention.h): a causal depthwise convolution of
// `convKernel` taps over q, k and v, then the gated delta rule over `numValueHeads` heads (each q/k head serving
// numValueHeads / numKeyHeads of them). Qwen3_5TextConfig's defaults.
struct LinearAttentionConfig {
  std::int64_t convKernel = 4, keyHeadDim = 128, valueHeadDim = 128, numKeyHeads = 16, numValueHeads = 32;
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
  // Gemma 3: the sliding layers' own RoPE (local base, unscaled); `rope` is then the full layers' (global).
  std::optional<RopeConfig> slidingRope;
  bool tieWordEmbeddings = false;
  bool attentionBias = false;        // q/k/v projections carry biases
  bool attentionOutputBias = false;  // so does o_proj (Llama's attention_bias, GPT-OSS; not Qwen2)
  bool mlpBias = false;
  bool qkNorm = false;              // per-head RMSNorm on queries and keys (Qwen3; Gemma 3's in its NormStyle)
  bool attentionSinks = false;      // GPT-OSS: a learned per-head logit each softmax row also normalises over
  std::int64_t slidingWindow = 0;   // keys within this many positions of the query, on the sliding layers
  std::vector<bool> slidingLayers;  // per layer: sliding-window attention, else full causal (Note [Sliding windows])
  // Granite's scales (1 elsewhere): the embedding's output times embeddingMultiplier, each sublayer's output times
  // residualMultiplier before its residual add, the logits divided by logitsScaling; attentionScale multiplies the
  // attention scores (Granite's attention_multiplier; 0: 1 / sqrt(headDim), every other family).
  double embeddingMultiplier = 1.0, residualMultiplier = 1.0, logitsScaling = 1.0, attentionScale = 0.0;
  // Gemma: the embedding multiplier (sqrt(hidden)) is rounded to the model dtype before it multiplies, as
  // transformers' embed_scale.to(weight.dtype).
  bool embeddingMultiplierInModelDtype = false;
  Activation activation = Activation::kSilu;
  NormStyle normStyle = NormStyle::kLlama;
  NormPlacement normPlacement = NormPlacement::kPre;
  // OLMo 2: RMSNorm on the whole q and k projections (widths heads x head_dim and kv heads x head_dim) before
  // they split into heads; RoPE computed in float32 and cast back.
  bool qkNormFullWidth = false;
  bool rotaryInFloat32 = false;
  // Soft-capping, x -> cap * tanh(x / cap) (Gemma 2): of the attention scores before the mask, and of the final
  // logits before the loss; 0 = none.
  double attentionSoftcap = 0.0, finalLogitSoftcap = 0.0;
  // Phi-3: q, k and v stored and computed as one qkv_proj; Phi-3 and GLM-4: gate and up as one gate_up_proj
  // (LoRA adapts the fused projections, as PEFT's target_modules name them). RoPE on the first rotaryDim() dims of
  // each head (Phi-3, GLM-4), GLM-4's on interleaved pairs (x0, x1), (x2, x3), ... rather than the two halves.
  bool fusedQkv = false, fusedGateUp = false;
  double partialRotaryFactor = 1.0;
  bool interleavedRotary = false;
  std::int64_t rotaryDim() const {
    return static_cast<std::int64_t>(static_cast<double>(headDim) * partialRotaryFactor);
  }
  // Qwen3.5: per layer, Gated DeltaNet in place of attention (layer_types "linear_attention"); its full-attention
  // layers' q_proj yields a gate per head beside the query, attention's output times sigmoid(gate).
  std::vector<bool> linearLayers;
  LinearAttentionConfig linearAttention;
  bool gatedAttention = false;
  bool linear(std::int64_t layer) const {
    return layer < static_cast<std::int64_t>(linearLayers.size()) && linearLayers[layer];
  }
  std::int64_t bosTokenId = -1;
  std::int64_t eosTokenId = -1;
  // pad_token_id where it names a row of the embedding (-1 none): transformers builds the embedding with it as
  // nn.Embedding's padding_idx, whose row the lookup gives no gradient (Phi-3's 32000 is <|endoftext|>).
  std::int64_t padTokenId = -1;
  double initializerRange = 0.02;       // std of the normal init for training from scratch
  std::string storedDtype = "float32";  // torch_dtype / dtype of the checkpoint, informational
  MoeConfig moe;

  bool sliding(std::int64_t layer) const {
    return layer < static_cast<std::int64_t>(slidingLayers.size()) && slidingLayers[layer];
  }
};

// Note [Sliding windows]
// A sliding layer's query i sees key j of its document when i - j < slidingWindow (transformers'
// sliding_window_overlay). Which layers slide is each config class's rule, read as transformers reads it:
//   gpt_oss    every other layer from layer 0 (window 128 unless given), or as layer_types says;
//   mistral    every layer when sliding_window is set: absent means MistralConfig's 4096, null none
//              (Mistral 7B v0.1 slides, v0.2 on and Nemo do not); layer_types is ignored, as transformers does;
//   qwen2/qwen3  only with use_sliding_window: layers from max_window_layers (28 unless given) on, or as
//              layer_types says; the window as Mistral's;
//   qwen3_moe  only with use_sliding_window: every layer;
//   gemma2     layers 0, 2, 4, ... (window 4096 unless given);
//   gemma3_text  five local layers to one global: layer i slides unless (i + 1) % sliding_window_pattern == 0
//              (6 unless given), or as layer_types says (window 4096 unless given);
//   llama      none (a layer_types "sliding_attention" is refused).
// A window as long as the longest document changes nothing, so attention takes the full-causal kernels then.

// model_type's name for `arch`, and the supported ones as a quoted list for messages.
const char* architectureName(Architecture arch);
std::string supportedModelTypes();

// Parses and validates; `source` (a file name) prefixes every error message.
ModelConfig parseModelConfig(const nlohmann::json& json, const std::string& source);
// Reads <path>/config.json when `path` is a directory (a model directory), else the file `path`.
ModelConfig loadModelConfig(const std::string& path);

}  // namespace rp::model
