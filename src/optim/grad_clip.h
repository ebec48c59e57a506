// Global gradient-norm clipping over fp32 buffers, as torch.nn.utils.clip_grad_norm_ (L2, eps 1e-6). `threads`
// split each pass (common/parallel.h); the results do not depend on them.
#pragma once

#include <cstddef>
#include <span>

namespace rp::optim {

struct GradBuffer {
  float* data;
  std::size_t n;
};

// Sum of squares over all buffers, accumulated in double in fixed blocks (Note [Blocked sum of squares]): the
// part of the squared norm one shard holds (a sharded gradient sums it over the shards).
double sumOfSquares(std::span<const GradBuffer> grads, int threads = 1);
// L2 norm over all buffers, accumulated in double.
double globalGradNorm(std::span<const GradBuffer> grads, int threads = 1);
// Scales every gradient by maxNorm / (norm + 1e-6) when that is < 1, given the global `norm`; maxNorm <= 0
// disables clipping.
void clipToNorm(std::span<const GradBuffer> grads, double norm, double maxNorm, int threads = 1);
// Scales every gradient by maxNorm / (norm + 1e-6) when that is < 1. Returns the norm before clipping.
// maxNorm <= 0 disables clipping (the norm is still returned).
double clipGradNorm(std::span<const GradBuffer> grads, double maxNorm, int threads = 1);

}  // namespace rp::optim
