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

// sum over rows with targets[i] != ignoreIndex of -log softmax(hidden[i] W^T)[targets[i]], in float32.
// hidden [N, H] and weight [V, H] in the model dtype, targets [N] int64. Differentiable in hidden and weight.
torch::Tensor linearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                 std::int64_t chunkRows, std::int64_t ignoreIndex);

}  // namespace rp::model
