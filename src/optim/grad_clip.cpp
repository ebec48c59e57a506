#include "optim/grad_clip.h"

#include <cmath>
#include <vector>

#include "common/parallel.h"

namespace rp::optim {
namespace {

// Note [Blocked sum of squares]: each buffer is cut into blocks of kSumBlock elements, each block summed in
// double from zero, and the block sums added in order — the same additions whichever threads took the blocks.
constexpr std::size_t kSumBlock = std::size_t{1} << 16;

}  // namespace

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
    for (std::size_t b = first; b < last; ++b) {
      double sumSq = 0.0;
      for (std::size_t i = 0; i < blocks[b].n; ++i) sumSq += static_cast<double>(blocks[b].data[i]) * blocks[b].data[i];
      sums[b] = sumSq;
    }
  });
  double total = 0.0;
  for (const double s : sums) total += s;
  return total;
}

double globalGradNorm(std::span<const GradBuffer> grads, int threads) {
  return std::sqrt(sumOfSquares(grads, threads));
}

void clipToNorm(std::span<const GradBuffer> grads, double norm, double maxNorm, int threads) {
  if (maxNorm <= 0.0) return;
  const double coef = maxNorm / (norm + 1e-6);
  if (coef >= 1.0) return;
  const auto c = static_cast<float>(coef);
  std::size_t elements = 0;
  for (const auto& g : grads) elements += g.n;
  const int parts = parallel::partsFor(elements, threads);
  parallel::forEachPart(parts, [&](int part) {
    for (const auto& g : grads) {
      const auto [begin, end] = parallel::partOf(g.n, part, parts);
      for (std::size_t i = begin; i < end; ++i) g.data[i] *= c;
    }
  });
}

double clipGradNorm(std::span<const GradBuffer> grads, double maxNorm, int threads) {
  const double norm = globalGradNorm(grads, threads);
  clipToNorm(grads, norm, maxNorm, threads);
  return norm;
}

}  // namespace rp::optim
