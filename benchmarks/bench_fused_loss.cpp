// The fused stage's LM-head + loss: resident peak (forward + backward) of the streamed loss against one chunk
// over every token (the whole [tokens, vocab] logits at once), for a 32K and a 152K vocabulary, next to the
// size of the full float32 logits and the streamed loss's own bound (one chunk's logits). Prints one table.
// Usage: bench_fused_loss [tokens] [hidden] (default 2048 tokens, hidden 512; one compute thread).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/resident_memory.h"
#include "model/layers.h"
#include "model/libtorch.h"
#include "model/linear_cross_entropy.h"

namespace {

struct Measured {
  double peakMb, seconds, loss;
};

Measured measure(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab, std::int64_t chunk,
                 torch::ScalarType dtype) {
  torch::manual_seed(1);
  const auto weight = (0.02 * torch::randn({vocab, hidden})).to(dtype).requires_grad_(true);
  const auto h = torch::randn({tokens, hidden}).to(dtype).requires_grad_(true);
  const auto targets = torch::randint(vocab, {tokens}, torch::kInt64);
  rp::resetResidentPeak();
  const std::int64_t before = rp::readResidentMemory().bytes;
  const auto start = std::chrono::steady_clock::now();
  const auto loss = rp::model::linearCrossEntropy(h, weight, targets, chunk, rp::model::kIgnoreIndex);
  loss.backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::int64_t peak = rp::readResidentMemory().peakBytes - before;
  return {static_cast<double>(peak) / 1e6, seconds, loss.item<double>()};
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 2048;
  const std::int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 512;
  torch::set_num_threads(1);
  if (!rp::resetResidentPeak()) {
    std::fprintf(stderr, "bench_fused_loss: cannot reset the resident peak (/proc/self/clear_refs)\n");
    return 1;
  }
  std::printf("tokens %lld, hidden %lld; peak = resident growth during forward + backward\n",
              static_cast<long long>(tokens), static_cast<long long>(hidden));
  std::printf("%-7s %-9s %-22s %12s %15s %12s %9s\n", "vocab", "dtype", "loss computed as", "chunk rows",
              "full logits MB", "peak MB", "seconds");
  for (const std::int64_t vocab : {32000, 151936}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const std::int64_t autoChunk = rp::model::autoChunkRows(tokens, hidden, vocab);
      const double fullMb = static_cast<double>(tokens * vocab * 4) / 1e6;
      for (const auto& [name, chunk] : {std::pair<const char*, std::int64_t>{"one chunk (unchunked)", tokens},
                                        std::pair<const char*, std::int64_t>{"streamed, auto chunk", autoChunk}}) {
        const Measured m = measure(tokens, hidden, vocab, chunk, dtype);
        std::printf("%-7lld %-9s %-22s %12lld %15.1f %12.1f %9.2f\n", static_cast<long long>(vocab),
                    dtype == torch::kFloat ? "float32" : "bfloat16", name, static_cast<long long>(chunk), fullMb,
                    m.peakMb, m.seconds);
      }
    }
  }
  return 0;
}
