// The LM head's projection fused with the cross-entropy, streamed over chunks of tokens (the technique of
// fused linear cross-entropy kernels): the forward computes each chunk's logits, its summed loss and, when
// gradients are wanted, the chunk's gradient with respect to the hidden states and the head weight, then
// frees the chunk's logits; the backward only scales the saved gradients. So at most one chunk of logits
// exists at a time, in training as in evaluation (docs/architecture.md, "Model").
#pragma once

#include <cstdint>

#include "model/libtorch.h"

namespace rp::model {

// Rows of a chunk when `chunkTokens` is 0 (auto): the chunk's logits hold about as many elements as the
// hidden states ([rows, hidden]), i.e. rows / ceil(vocab / hidden), but at least kMinAutoChunkRows (smaller
// matmuls waste the hardware: docs/benchmarks.md) and at most `rows`.
inline constexpr std::int64_t kMinAutoChunkRows = 256;
std::int64_t autoChunkRows(std::int64_t rows, std::int64_t hidden, std::int64_t vocab);

// What becomes of the logits before the loss, in the model dtype as transformers does it: divided (Granite's
// logits_scaling), then soft-capped, cap * tanh(x / cap) (Gemma 2's final_logit_softcapping; 0 none).
struct LogitTransform {
  double divisor = 1.0;
  double softcap = 0.0;
};

// sum over rows with targets[i] != ignoreIndex of -log softmax(f(hidden[i] W^T))[targets[i]], in float32, f the
// logits' transform. hidden [N, H] and weight [V, H] in the model dtype, targets [N] int64. Differentiable in
// hidden and weight.
torch::Tensor linearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                 std::int64_t chunkRows, std::int64_t ignoreIndex,
                                 const LogitTransform& transform = {});

}  // namespace rp::model
