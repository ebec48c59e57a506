// Global gradient-norm clipping over fp32 buffers, as torch.nn.utils.clip_grad_norm_ (L2, eps 1e-6): the norm
// here, the scaling in the AdamW update (Note [Clipping in the update]). `threads` split the norm's pass
// (common/parallel.h); the result does not depend on them.
#pragma once

#include <cstddef>
#include <span>

#include "optim/adamw.h"

namespace rp::optim {

struct GradBuffer {
  float* data;
  std::size_t n;
};

// Note [Blocked sum of squares]'s block: a buffer's squares are summed in double from zero over blocks of this
// many elements, and the blocks' sums added in order.
inline constexpr std::size_t kSumBlock = std::size_t{1} << 16;
// One block's sum of squares (at most kSumBlock elements): what sumOfSquares adds for it.
double blockSumOfSquares(const float* data, std::size_t n);
// The same of a gradient read in place (GradIn::at's values), bitwise.
double blockSumOfSquares(const GradIn& g, std::size_t n);
// Sum of squares over all buffers, accumulated in double in fixed blocks (Note [Blocked sum of squares]): the
// part of the squared norm one shard holds (a sharded gradient sums it over the shards).
double sumOfSquares(std::span<const GradBuffer> grads, int threads = 1);
// L2 norm over all buffers, accumulated in double.
double globalGradNorm(std::span<const GradBuffer> grads, int threads = 1);
// What clip_grad_norm_ multiplies every gradient by, given the global `norm`: maxNorm / (norm + 1e-6) as float32
// when that is < 1, else 1; maxNorm <= 0 disables clipping (1). AdamW::step applies it.
float clipCoefficient(double norm, double maxNorm);

}  // namespace rp::optim
