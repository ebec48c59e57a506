#include "optim/grad_clip.h"

#include <cmath>
#include <vector>

#include "common/parallel.h"

namespace rp::optim {

// Note [Blocked sum of squares]: each buffer is cut into blocks of kSumBlock elements, each block summed in
// double from zero, and the block sums added in order — the same additions whichever threads took the blocks
// (and whether a block was summed here or right after its widening: Note [Norm while widening]).
// Within a block, element i goes to the i mod 8-th of eight partial sums, added pairwise at the end: eight
// independent chains of additions, where one chain's latency bounded the pass (twice as slow on our VM).
namespace {

template <typename Load>
double blockSum(Load load, std::size_t n) {
  constexpr std::size_t kChains = 8;
  double partial[kChains] = {};
  std::size_t i = 0;
  for (; i + kChains <= n; i += kChains) {
    for (std::size_t j = 0; j < kChains; ++j) {
      const double x = load(i + j);
      partial[j] += x * x;
    }
  }
  for (std::size_t j = 0; i + j < n; ++j) {
    const double x = load(i + j);
    partial[j] += x * x;
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

}  // namespace

double blockSumOfSquares(const float* data, std::size_t n) {
  return blockSum([data](std::size_t i) { return data[i]; }, n);
}

// The same float32 values the widening would have written (Note [Gradients read in place]).
double blockSumOfSquares(const GradIn& g, std::size_t n) {
  if (g.f32 != nullptr) return blockSumOfSquares(g.f32, n);
  const std::uint16_t *first = g.bf16[0], *second = g.bf16[1];
  if (second == nullptr) return blockSum([first](std::size_t i) { return fromBFloat16(first[i]); }, n);
  return blockSum([first, second](std::size_t i) { return fromBFloat16(first[i]) + fromBFloat16(second[i]); }, n);
}

double sumOfSquares(std::span<const GradBuffer> grads, int threads) {
  struct Block {
    const float* data;
    std::size_t n;
  };
  std::vector<Block> blocks;
  std::size_t elements = 0;
  for (const auto& g : grads) {
    for (std::size_t begin = 0; begin < g.n; begin += kSumBlock)
      blocks.push_back({g.data + begin, std::min(kSumBlock, g.n - begin)});
    elements += g.n;
  }
  std::vector<double> sums(blocks.size(), 0.0);
  const int parts = parallel::partsFor(elements, threads);
  parallel::forEachPart(parts, [&](int part) {
    const auto [first, last] = parallel::partOf(blocks.size(), part, parts, 1);
    for (std::size_t b = first; b < last; ++b) sums[b] = blockSumOfSquares(blocks[b].data, blocks[b].n);
  });
  double total = 0.0;
  for (const double s : sums) total += s;
  return total;
}

double globalGradNorm(std::span<const GradBuffer> grads, int threads) {
  return std::sqrt(sumOfSquares(grads, threads));
}

// Note [Clipping in the update]
// clip_grad_norm_ multiplies every gradient by the coefficient in place, then AdamW reads them: two passes over
// the float32 gradients (read and write 8 bytes per parameter) before the update's 30. The AdamW kernels instead
// multiply each gradient by the coefficient as they load it — the same float32 multiplication of the same
// values, so the update is bitwise the one after an in-place clip (tests/unit/test_adamw_kernels.cpp) — and the
// gradients themselves stay unclipped (nothing reads them after the update).
float clipCoefficient(double norm, double maxNorm) {
  if (maxNorm <= 0.0) return 1.0f;
  const double coef = maxNorm / (norm + 1e-6);
  return coef >= 1.0 ? 1.0f : static_cast<float>(coef);
}

}  // namespace rp::optim
