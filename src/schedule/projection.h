// GPU projections (docs/simulator.md, "GPU projections"): simulator costs for a model shape on a hardware
// profile from FLOP and byte counts — projections under stated assumptions, not measurements. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "schedule/sim.h"

namespace rp::schedule {

// The parts of a Hugging Face config.json (model::ModelConfig) the counts need.
struct ModelShape {
  int layers = 0, hidden = 0, intermediate = 0, heads = 0, kvHeads = 0, headDim = 0;
  long vocab = 0;
  // Mixture of experts (docs/moe.md): `sparseLayers` of the layers route each token to `expertsPerToken` of
  // `experts` SwiGLU experts of width `expertIntermediate` (plus a router) instead of the dense MLP.
  int sparseLayers = 0, experts = 0, expertsPerToken = 0, expertIntermediate = 0;
  // One decoder layer's matmul parameters, the mean over the layers: stored (bytes follow every expert) and
  // active per token (time follows the chosen experts).
  double layerParams() const;
  double layerActiveParams() const;
  double params() const;  // all: layers, embedding, head (untied counted once more)
  // Of layerParams(), the mean a layer's NF4 base quantises (model::nf4Linear: attention and dense-MLP
  // projections; not a sparse layer's router or experts).
  double layerNf4Params() const;
  bool tied = false;
  bool qkNorm = false;  // Qwen3's per-head norms on queries and keys
  // Qwen3.5: `linearLayers` of the layers are Gated DeltaNet of `linearParams` matmul parameters in place of
  // attention (whose q_proj, with `gatedAttention`, is twice as wide). Their FLOPs are counted as attention with
  // the window (in `windows`) that gives the same FLOPs a token: linearAttentionWindow.
  int linearLayers = 0;
  double linearParams = 0.0;
  bool gatedAttention = false;
  // Per decoder layer, the sliding window its attention keeps to (0: full causal; empty: none slides).
  std::vector<std::int64_t> windows;
  std::int64_t window(int layer) const {
    return layer < static_cast<int>(windows.size()) ? windows[static_cast<std::size_t>(layer)] : 0;
  }
};
ModelShape shapeOf(const model::ModelConfig& config);
// The window whose attention FLOPs a token (4 x heads x head_dim a pair) equal a Gated DeltaNet layer's (model/
// linear_attention.h, chunks of C = 64): per value head and token, the chunk's two products with its keys and
// their triangular solves, 3·C·(dk + dv), and the state's read, correction and update, 6·dk·dv.
std::int64_t linearAttentionWindow(const model::ModelConfig& config);
// A config.json (or a model directory) read by model::loadModelConfig: errors name the file and the field.
ModelShape loadModelShape(const std::string& configJson);

// Note [One FLOP model]: what a microbatch costs a GPU, the one count the planner's proxy costs, the simulator's
// projections, the emulated device's compute and the MFU line all take. A decoder layer's forward is its matmuls
// (2 x active parameters a token) and its attention: QK^T and AV, 4 x heads x head_dim a query-key pair, over the
// pairs a causal kernel visits (attentionPairs: per document, as the varlen kernel runs packed documents). Its
// backward: the activation and weight gradients, 2 x the forward; with the base frozen (LoRA) the matmuls'
// activation gradients alone (1 x their forward) and attention's backward (2 x, it has no weights); the adapters'
// own FLOPs are negligible and not counted. The head: the LM-head matmul forward; its backward the input's
// gradient and, when trained, the weight's (our streamed loss computes both in the forward:
// model/linear_cross_entropy.h). The embedding's lookup is a gather: no FLOPs.
struct LayerFlops {
  double forward = 0.0, backward = 0.0;
};

// The query-key pairs a causal kernel visits over documents of the given lengths, counted as half the square
// (L^2 / 2 a document of L tokens); with a window w > 0, w a query once past the first w (w·L − w²/2).
double attentionPairs(const std::vector<std::int64_t>& documentLengths, std::int64_t window = 0);
// The same for `rows` rows of `seq` tokens, each holding documents of `documentTokens` (the last of a row cut
// short; 0 or >= seq: one document a row).
double packedAttentionPairs(int seq, int rows, int documentTokens = 0, std::int64_t window = 0);

LayerFlops decoderLayerWork(const ModelShape& model, double tokens, double pairs, bool frozen);
LayerFlops headWork(const ModelShape& model, double tokens, bool frozen);

// Forward FLOPs of one microbatch of `rows` sequences of `seq` tokens (one document each) through a decoder
// layer (of sliding `window`, 0 none: ModelShape::window) and through the head (the planner's proxy costs, the
// MFU line).
double decoderLayerFlops(const ModelShape& model, int seq, int rows, std::int64_t window = 0);

// Note [Activation bytes]: what one decoder layer's autograd graph holds after its forward, for `tokens`
// tokens in a model of `elementBytes` (4 float32, 2 bfloat16/float16), counted from what our layers save
// (model/layers.cpp, model/attention.cpp), per token: each norm's input as float32 and its output, the layer's
// output; q rotated, attention's output, its concatenation over documents and the [T, H·D] copy for o_proj, k
// rotated and v (Qwen3: also q's and k's norms' float32 inputs and outputs); the MLP's gate, activation, up
// and product (a sparse layer: its k experts' four widths and each token's k copies in and out). Attention
// holds O(T) (flash and per-document kernels), never a [T, T] score matrix. Measured on the CPU
// (tests/unit/test_activation_memory.cpp) within 10% at 8k and 16k tokens, float32 and bfloat16.
double decoderLayerActivationBytes(const ModelShape& model, double tokens, int elementBytes, bool sparse);
// What the layer's backward allocates beside its graph at its peak: the MLP's backward holds the gradients of
// two of its intermediate tensors at once (per token 2 x intermediate, a sparse layer's k experts' widths) while
// the graph is still whole. Measured on the CPU in float32 (the same test) within 10% at 8k and 16k tokens.
double decoderLayerBackwardWorkingBytes(const ModelShape& model, double tokens, int elementBytes, bool sparse);
// What a backward job holds for one decoder layer beside its graph: the layer's backward working memory (above)
// and the job's input, the gradient it receives and the one it sends (3 x tokens x hidden, not in the graph).
double decoderLayerJobWorkingBytes(const ModelShape& model, double tokens, int elementBytes, bool sparse);
double headFlops(const ModelShape& model, int seq, int rows);

// A cluster-configs/*.toml profile.
struct Hardware {
  std::string name;
  int gpus = 0;
  double memoryGb = 0, tensorTflops = 0, pcieGBs = 0, p2pGBs = 0, efficiency = 0;
  int gpusPerBridge = 1;
  bool p2p = false;
  double kernelFloorUs = 0;  // [assumptions] kernel_floor_us, optional: what each kernel adds (the emulated device)
  // [link] pageable_gbps, optional: the bridge's rate for copies from or to pageable host memory (the emulated
  // device with pipeline.emulated_pinned = false); half pcie_gbps where absent, an assumption.
  double pageableGBs = 0;
  // [network], optional: `nodes` such hosts, data parallel over an Ethernet link of `networkGbps` Gbit/s of
  // which the exchange achieves `networkEfficiency`.
  int nodes = 1;
  double networkGbps = 0, networkEfficiency = 1;
};
Hardware loadHardware(const std::string& toml);

// The LoRA rank the projections count adapters at (every projection of the default targets, experts included).
inline constexpr int kProjectionLoraRank = 16;

// A frozen base's bytes per parameter: bfloat16, and the NF4 store's (model/nf4.h, Note [Packed NF4]: half a
// byte plus a float32 absmax per 64 values; lora.double_quant saves another 0.05, not counted here).
inline constexpr double kBf16Bytes = 2.0;
inline constexpr double kNf4Bytes = 0.5 + 4.0 / 64;
// The host bytes of a LoRA run's frozen base: every parameter in bf16, or with `nf4` the quantised ones
// (layerNf4Params) at kNf4Bytes.
double frozenBaseBytes(const ModelShape& model, bool nf4);

// Bytes each node sends per step in the cross-node gradient all-reduce over `nodes` (docs/optimizer.md): the
// runtime sums fp32 gradients of the trainable parameters (every weight; with `lora`, rank-16 adapters on q, k,
// v, o, gate, up, down, and on every expert's gate_up and down), and a ring all-reduce sends 2 (N-1)/N times
// them. 0 for one node.
double exchangeBytes(const ModelShape& model, int nodes, bool lora);
// Milliseconds per step that exchange takes on the hardware's network, counted unhidden: the overlap with the
// backward was measured to hide nothing on our test cluster (docs/benchmarks.md).
double exchangeMs(const ModelShape& model, const Hardware& hardware, bool lora);

// Milliseconds per microbatch of `rows` sequences of `seq` tokens in bf16, each row holding documents of
// `documentTokens` (0: one a row): the FLOP model (Note [One FLOP model]; `lora`: the base and head frozen, and
// no weight gradient downloaded) at hardware.efficiency of the tensor peak, weight uploads over the host link
// shared by gpusPerBridge GPUs, activation hops over NVLink or (no P2P) twice over the host link. With `nf4`
// too, each layer uploads its quantised projections at kNf4Bytes a parameter (the dequantisation's time on the
// GPU is not counted).
SimCosts projectCosts(const ModelShape& model, const Hardware& hardware, int seq, int rows, bool lora = false,
                      bool nf4 = false, int documentTokens = 0);

// Whether weight-bound training fits: bf16 weights and gradients, fp32 masters and Adam moments (16 bytes
// per parameter; `lora`: the frozen bf16 weights alone, 2 bytes) of one stage of `layers` decoder layers (plus
// the head on the last), the activations of `inFlight` microbatches kept for backward (with `recompute`, only
// each layer's input) and, with any in flight, what one layer's backward needs beside them: its working memory
// and, with `recompute`, the graph it rebuilds (the runtime planner's count, engine/costs.h).
bool boundStageFits(const ModelShape& model, const Hardware& hardware, int layers, bool withHead, int seq, int rows,
                    int inFlight, bool recompute, bool lora = false);

}  // namespace rp::schedule
