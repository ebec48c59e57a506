#include "schedule/projection.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <toml++/toml.h>

#include "common/error.h"

namespace rp::schedule {

namespace {

// A layer's token mixer: attention (a gated q_proj twice as wide), or the mean with Gated DeltaNet's.
double attentionParams(const ModelShape& m) {
  const double attn = static_cast<double>(m.heads) * m.headDim, kv = static_cast<double>(m.kvHeads) * m.headDim;
  const double full = m.hidden * attn * (m.gatedAttention ? 2.0 : 1.0) + 2.0 * m.hidden * kv + attn * m.hidden;
  const double linear = m.layers > 0 ? static_cast<double>(m.linearLayers) / m.layers : 0.0;
  return (1.0 - linear) * full + linear * m.linearParams;
}

double sparseFraction(const ModelShape& m) {
  return m.layers > 0 ? static_cast<double>(m.sparseLayers) / m.layers : 0.0;
}

// A layer's parameters with `expertsCounted` experts per sparse layer (all of them: stored; the chosen: active).
double meanLayerParams(const ModelShape& m, int expertsCounted) {
  const double dense = 3.0 * m.hidden * static_cast<double>(m.intermediate);
  const double sparse = 3.0 * m.hidden * static_cast<double>(m.expertIntermediate) * expertsCounted +
                        static_cast<double>(m.experts) * m.hidden;  // + the router
  const double fraction = sparseFraction(m);
  return attentionParams(m) + (1.0 - fraction) * dense + fraction * sparse;
}

}  // namespace

double ModelShape::layerParams() const {
  return meanLayerParams(*this, experts);
}

double ModelShape::layerActiveParams() const {
  return meanLayerParams(*this, expertsPerToken);
}

double ModelShape::layerNf4Params() const {
  return attentionParams(*this) + (1.0 - sparseFraction(*this)) * 3.0 * hidden * static_cast<double>(intermediate);
}

double frozenBaseBytes(const ModelShape& m, bool nf4) {
  const double quantised = nf4 ? m.layers * m.layerNf4Params() : 0.0;
  return kBf16Bytes * (m.params() - quantised) + kNf4Bytes * quantised;
}

double ModelShape::params() const {
  const double embedding = static_cast<double>(vocab) * hidden;
  return layers * layerParams() + embedding * (tied ? 1.0 : 2.0);
}

ModelShape shapeOf(const model::ModelConfig& c) {
  ModelShape m;
  m.layers = static_cast<int>(c.numLayers);
  m.hidden = static_cast<int>(c.hiddenSize);
  m.intermediate = static_cast<int>(c.intermediateSize);
  for (std::int64_t l = 0; l < c.numLayers; ++l) m.sparseLayers += c.moe.sparse(l) ? 1 : 0;
  m.experts = static_cast<int>(c.moe.numExperts);
  m.expertsPerToken = static_cast<int>(c.moe.expertsPerToken);
  m.expertIntermediate = static_cast<int>(c.moe.expertIntermediateSize);
  m.heads = static_cast<int>(c.numHeads);
  m.kvHeads = static_cast<int>(c.numKvHeads);
  m.headDim = static_cast<int>(c.headDim);
  m.vocab = static_cast<long>(c.vocabSize);
  m.tied = c.tieWordEmbeddings;
  m.qkNorm = c.qkNorm || c.qkNormFullWidth;
  m.gatedAttention = c.gatedAttention;
  const model::LinearAttentionConfig& a = c.linearAttention;
  const double keys = static_cast<double>(a.numKeyHeads * a.keyHeadDim),
               values = static_cast<double>(a.numValueHeads * a.valueHeadDim);
  m.linearParams = static_cast<double>(c.hiddenSize) * (2.0 * keys + 3.0 * values + 2.0 * a.numValueHeads);
  for (std::int64_t l = 0; l < c.numLayers; ++l) {
    m.linearLayers += c.linear(l) ? 1 : 0;
    m.windows.push_back(c.linear(l) ? linearAttentionWindow(c) : c.sliding(l) ? c.slidingWindow : 0);
  }
  return m;
}

std::int64_t linearAttentionWindow(const model::ModelConfig& c) {
  const model::LinearAttentionConfig& a = c.linearAttention;
  const double chunk = 64.0, dk = static_cast<double>(a.keyHeadDim), dv = static_cast<double>(a.valueHeadDim);
  const double perToken = static_cast<double>(a.numValueHeads) * (3.0 * chunk * (dk + dv) + 6.0 * dk * dv);
  return std::max<std::int64_t>(1, std::llround(perToken / (4.0 * static_cast<double>(c.numHeads * c.headDim))));
}

ModelShape loadModelShape(const std::string& path) {
  return shapeOf(model::loadModelConfig(path));
}

double attentionPairs(const std::vector<std::int64_t>& lengths, std::int64_t window) {
  double pairs = 0.0;
  for (const std::int64_t n : lengths) {
    const auto L = static_cast<double>(n);
    const auto w = static_cast<double>(window);
    pairs += window > 0 && L > w ? w * L - w * w / 2.0 : L * L / 2.0;
  }
  return pairs;
}

double packedAttentionPairs(int seq, int rows, int documentTokens, std::int64_t window) {
  std::vector<std::int64_t> row;
  const int each = documentTokens > 0 && documentTokens < seq ? documentTokens : seq;
  for (int at = 0; at < seq; at += each) row.push_back(std::min(each, seq - at));
  return rows * attentionPairs(row, window);
}

LayerFlops decoderLayerWork(const ModelShape& m, double tokens, double pairs, bool frozen) {
  const double matmuls = 2.0 * m.layerActiveParams() * tokens;
  const double attention = 4.0 * m.heads * static_cast<double>(m.headDim) * pairs;  // QK^T + AV
  return {matmuls + attention, frozen ? matmuls + 2.0 * attention : 2.0 * (matmuls + attention)};
}

LayerFlops headWork(const ModelShape& m, double tokens, bool frozen) {
  const double forward = 2.0 * static_cast<double>(m.vocab) * m.hidden * tokens;
  return {forward, frozen ? forward : 2.0 * forward};
}

double decoderLayerFlops(const ModelShape& m, int seq, int rows, std::int64_t window) {
  return decoderLayerWork(m, static_cast<double>(seq) * rows, packedAttentionPairs(seq, rows, 0, window), false)
      .forward;
}

double decoderLayerActivationBytes(const ModelShape& m, double tokens, int elementBytes, bool sparse) {
  const double e = elementBytes, h = m.hidden;
  const double q = static_cast<double>(m.heads) * m.headDim, kv = static_cast<double>(m.kvHeads) * m.headDim;
  // Two norms: each input as float32 (a 16-bit model's upcast) and its output; the layer's output.
  const double norms = 2.0 * h * 4.0 + 2.0 * h * e + h * e;
  // q rotated, attention's output, their concatenation and the copy for o_proj; k rotated and v. Qwen3's
  // norms on q and k save their float32 inputs and outputs too.
  double attention = 4.0 * q * e + 2.0 * kv * e;
  if (m.qkNorm) attention += (q + kv) * (4.0 + e);
  const double mlp = sparse ? (4.0 * m.expertsPerToken * m.expertIntermediate + 2.0 * m.expertsPerToken * h) * e
                            : 4.0 * m.intermediate * e;
  return tokens * (norms + attention + mlp);
}

double decoderLayerBackwardWorkingBytes(const ModelShape& m, double tokens, int elementBytes, bool sparse) {
  const double width = sparse ? static_cast<double>(m.expertsPerToken) * m.expertIntermediate : m.intermediate;
  return tokens * 2.0 * width * elementBytes;
}

double decoderLayerJobWorkingBytes(const ModelShape& m, double tokens, int elementBytes, bool sparse) {
  return decoderLayerBackwardWorkingBytes(m, tokens, elementBytes, sparse) + 3.0 * tokens * m.hidden * elementBytes;
}

double headFlops(const ModelShape& m, int seq, int rows) {
  return headWork(m, static_cast<double>(seq) * rows, false).forward;
}

Hardware loadHardware(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    RP_THROW(InputError, "{}: {}", path, e.description());
  }
  auto number = [&](const char* key) {
    const auto v = t.at_path(key).value<double>();
    if (!v) RP_THROW(InputError, "{}: number '{}' is missing", path, key);
    return *v;
  };
  Hardware h;
  h.name = t.at_path("gpu.name").value_or(std::string("?"));
  h.gpus = static_cast<int>(number("gpu.count"));
  h.memoryGb = number("gpu.memory_gb");
  h.tensorTflops = number("gpu.tensor_tflops");
  h.pcieGBs = number("link.pcie_gbps");
  h.gpusPerBridge = static_cast<int>(number("link.gpus_per_host_bridge"));
  h.p2p = t.at_path("link.p2p").value_or(false);
  h.p2pGBs = h.p2p ? number("link.p2p_gbps") : 0.0;
  h.efficiency = number("assumptions.matmul_efficiency");
  h.kernelFloorUs = t.at_path("assumptions.kernel_floor_us").value_or(0.0);
  h.pageableGBs = t.at_path("link.pageable_gbps").value_or(h.pcieGBs / 2);
  if (h.gpus < 1 || h.tensorTflops <= 0 || h.pcieGBs <= 0 || h.gpusPerBridge < 1 || h.efficiency <= 0 ||
      h.efficiency > 1 || h.kernelFloorUs < 0 || h.pageableGBs <= 0) {
    RP_THROW(InputError,
             "{}: gpu.count, gpu.tensor_tflops, link.pcie_gbps, link.gpus_per_host_bridge (and link.pageable_gbps "
             "where given) must be positive, assumptions.matmul_efficiency in (0, 1] and "
             "assumptions.kernel_floor_us not negative",
             path);
  }
  if (t.contains("network")) {
    h.nodes = static_cast<int>(number("network.nodes"));
    h.networkGbps = number("network.gbit_per_s");
    h.networkEfficiency = number("network.achieved_fraction");
    if (h.nodes < 1 || h.networkGbps <= 0 || h.networkEfficiency <= 0 || h.networkEfficiency > 1) {
      RP_THROW(InputError,
               "{}: network.nodes must be at least 1, network.gbit_per_s positive and network.achieved_fraction "
               "in (0, 1]",
               path);
    }
  }
  return h;
}

double exchangeBytes(const ModelShape& m, int nodes, bool lora) {
  if (nodes <= 1) return 0.0;
  double trainable = m.params();
  if (lora) {
    // rank x (in + out) per adapted projection: attention's four, the dense MLP's three; each expert's fused
    // gate_up (in h, out 2 x its width) and down (docs/moe.md).
    const double attn = static_cast<double>(m.heads) * m.headDim, kv = static_cast<double>(m.kvHeads) * m.headDim;
    const double attention = (m.hidden + attn) + 2.0 * (m.hidden + kv) + (attn + m.hidden);
    const double dense = 3.0 * (m.hidden + static_cast<double>(m.intermediate));
    const double sparse = m.experts * (2.0 * m.hidden + 3.0 * m.expertIntermediate);
    const double fraction = m.layers > 0 ? static_cast<double>(m.sparseLayers) / m.layers : 0.0;
    trainable = kProjectionLoraRank * m.layers * (attention + (1.0 - fraction) * dense + fraction * sparse);
  }
  return 4.0 * trainable * 2.0 * (nodes - 1) / nodes;
}

double exchangeMs(const ModelShape& m, const Hardware& h, bool lora) {
  if (h.nodes <= 1) return 0.0;
  return exchangeBytes(m, h.nodes, lora) / (h.networkGbps * 1e9 / 8.0 * h.networkEfficiency) * 1e3;
}

SimCosts projectCosts(const ModelShape& m, const Hardware& h, int seq, int rows, bool lora, bool nf4,
                      int documentTokens) {
  RP_CHECK(lora || !nf4, "an NF4 base is a LoRA run's");
  const double tokens = static_cast<double>(seq) * rows;
  const double flopsPerMs = h.tensorTflops * 1e12 * h.efficiency / 1e3;
  const double hostBytesPerMs = h.pcieGBs * 1e9 / h.gpusPerBridge / 1e3;
  const LayerFlops head = headWork(m, tokens, lora);
  const double headFwd = head.forward / flopsPerMs, headBwd = head.backward / flopsPerMs;
  SimCosts c;
  c.weightGradients = !lora;
  c.forward.push_back(0.0);  // the embedding lookup
  c.backward.push_back(0.0);
  c.weightTransfer.push_back(2.0 * static_cast<double>(m.vocab) * m.hidden / hostBytesPerMs);
  for (int l = 0; l < m.layers; ++l) {
    const LayerFlops layer =
        decoderLayerWork(m, tokens, packedAttentionPairs(seq, rows, documentTokens, m.window(l)), lora);
    c.forward.push_back(layer.forward / flopsPerMs);
    c.backward.push_back(layer.backward / flopsPerMs);
    const double quantised = nf4 ? m.layerNf4Params() : 0.0;
    c.weightTransfer.push_back((kBf16Bytes * (m.layerParams() - quantised) + kNf4Bytes * quantised) / hostBytesPerMs);
  }
  c.forward.push_back(headFwd);
  c.backward.push_back(headBwd);
  c.weightTransfer.push_back(2.0 * static_cast<double>(m.vocab) * m.hidden / hostBytesPerMs);
  const double activation = 2.0 * tokens * m.hidden;
  c.hop = h.p2p ? activation / (h.p2pGBs * 1e9 / 1e3) : 2.0 * activation / hostBytesPerMs;
  return c;
}

bool boundStageFits(const ModelShape& m, const Hardware& h, int layers, bool withHead, int seq, int rows, int inFlight,
                    bool recompute, bool lora) {
  const double params = layers * m.layerParams() + (withHead ? static_cast<double>(m.vocab) * m.hidden : 0.0);
  // Activations kept per layer per microbatch, bf16: without recompute a layer's autograd graph as our layers
  // save it (Note [Activation bytes], dense and sparse layers in their proportions; attention O(T)), the
  // runtime planner's count; with full recompute only the layer input (2·s·b·h bytes).
  const double tokens = static_cast<double>(seq) * rows;
  const double sparse = m.layers > 0 ? static_cast<double>(m.sparseLayers) / m.layers : 0.0;
  const double dense = decoderLayerActivationBytes(m, tokens, 2, false);
  const double expert = decoderLayerActivationBytes(m, tokens, 2, true);
  const double perLayer = recompute ? 2.0 * tokens * m.hidden : (1.0 - sparse) * dense + sparse * expert;
  // One layer's backward at a time, of the costlier kind the model has: its working memory, and with recompute
  // the graph it rebuilds.
  double backward = 0.0;
  if (inFlight > 0 && layers > 0) {
    if (sparse < 1.0) backward = decoderLayerJobWorkingBytes(m, tokens, 2, false) + (recompute ? dense : 0.0);
    if (sparse > 0.0)
      backward = std::max(backward, decoderLayerJobWorkingBytes(m, tokens, 2, true) + (recompute ? expert : 0.0));
  }
  const double activations = perLayer * layers * inFlight + backward;
  return (lora ? 2.0 : 16.0) * params + activations <= h.memoryGb * 1e9;
}

}  // namespace rp::schedule
