// Qwen3.5's linear attention, Gated DeltaNet (docs/model.md), as transformers' Qwen3_5GatedDeltaNet computes it
// with its torch_chunk_gated_delta_rule: q, k and v from one projection through a causal depthwise convolution
// and SiLU; per value head a decay g = -exp(A_log) * softplus(a + dt_bias) and a write strength beta =
// sigmoid(b); the gated delta rule over L2-normalised q and k in chunks of 64 (the state [dk, dv] a head carries
// from chunk to chunk, the chunk's own part solved as a unit-lower-triangular system); the output RMS-normalised
// per head and gated by SiLU(z). Packed documents stay apart: each starts with a zero state and an empty
// convolution window. LibTorch ops throughout; autograd gives the backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "model/layers.h"

namespace rp::model {

class GatedDeltaNet : public torch::nn::Module {
 public:
  GatedDeltaNet(const ModelConfig& config, const ParamOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const Documents& documents) const;
  std::vector<NamedTensor> hfParameters(const std::string& prefix) const;
  // The projection a LoRA target names by its module ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
  // "out_proj"); nullptr for other names.
  Projection* projection(const std::string& name) const;

  torch::Tensor convWeight;  // conv1d.weight [2 * keyDim + valueDim, 1, convKernel]
  torch::Tensor dtBias;      // dt_bias [value heads]
  torch::Tensor aLog;        // A_log [value heads]
  torch::Tensor normWeight;  // norm.weight [value head dim]: multiplies the normalised output (ones at init)

 private:
  // The convolution and the delta rule of one run of tokens with no document boundary inside: [R, L, ...].
  torch::Tensor mix(const torch::Tensor& qkv, const torch::Tensor& beta, const torch::Tensor& g) const;

  LinearAttentionConfig c_;
  double eps_;
  std::shared_ptr<Projection> inQkv_, inZ_, inB_, inA_, out_;
};

// The gated delta rule in chunks (transformers' torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel and no
// initial state): q, k [R, L, Hk, dk], v [R, L, Hv, dv], g and beta [R, L, Hv]. Returns [R, L, Hv, dv] in v's dtype.
torch::Tensor chunkGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& g, const torch::Tensor& beta, std::int64_t chunk = 64);

}  // namespace rp::model
