// AdamW on the host: our kernels (scalar, AVX2, AVX-512; 1 and 2 threads by default; with and without the fused bf16
// model copy, and on split masters: optim/adamw.h, Note [Split master]) in parameters/s and GB/s, beside this machine's
// memory bandwidth measured in the same binary (a STREAM triad) and LibTorch's torch::optim::AdamW on the same sizes;
// then the passes of one sync bf16 optimizer step over the same parameters (engine/optimizer_worker.cpp: widen the bf16
// gradient slots to float32, sum of squares, both at once (Note [Norm while widening]), AdamW with the clip and the
// bf16 copy fused: Note [Clipping in the update]) at 1 and 2 threads (Note [Optimizer threads]), and the same with the
// gradient read in place from the slot (Note [Gradients read in place]); then the zeroing of a rank's optimizer state
// (gradients and both moments) in memory just allocated, the old way and in parallel, beside zeroing memory already
// present (Note [Parallel first touch]). Prints three tables. Usage: bench_adamw [million parameters (default 16)]
// [thread counts of the first two tables (default 1,2; e.g. 1,2,16)]. DeepSpeed's CPU Adam:
// benchmarks/peer_deepspeed_adam.py.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>

#include <torch/torch.h>  // torch::optim::AdamW, the peer: not in model/libtorch.h

#include "common/parallel.h"
#include "optim/adamw_simd.h"
#include "optim/grad_clip.h"

using Clock = std::chrono::steady_clock;

namespace {

// Keeps the compiler from dropping a buffer nobody reads.
void escape(void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

// Median seconds of `reps` runs of `fn` (after one warm-up run).
template <typename Fn>
double timeIt(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// STREAM triad a[i] = b[i] + s·c[i], vectorised (AVX2), over `threads` threads. Reported like STREAM: 12
// bytes per element (the write-allocate read of a[] is not counted; AdamW writes only what it read).
__attribute__((target("avx2"))) void triad(float* __restrict a, const float* __restrict b, const float* __restrict c,
                                           std::size_t begin, std::size_t end) {
  const __m256 k = _mm256_set1_ps(3.0f);
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(b + i), _mm256_mul_ps(k, _mm256_loadu_ps(c + i))));
  }
  for (; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
}

double triadGBs(std::size_t n, int threads) {
  std::vector<float> a(n, 0.f), b(n, 1.f), c(n, 2.f);
  const double s = timeIt(5, [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { triad(a.data(), b.data(), c.data(), n * t / threads, n * (t + 1) / threads); });
    }
    for (auto& th : pool) th.join();
  });
  return 12.0 * static_cast<double>(n) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = (argc > 1 ? std::stoul(argv[1]) : 16) * 1000000;
  // The thread counts of the first two tables: a comma-separated list (default 1,2), e.g. "1,2,8,16" on a GPU host.
  std::vector<int> counts;
  for (std::stringstream list(argc > 2 ? argv[2] : "1,2"); list.good();) {
    std::string item;
    std::getline(list, item, ',');
    int count = 0;
    try {
      count = std::stoi(item);
    } catch (const std::exception&) {
    }
    if (count < 1) {
      std::fprintf(stderr, "bench_adamw: thread counts are integers >= 1 separated by commas, got '%s'\n",
                   item.c_str());
      return 2;
    }
    counts.push_back(count);
  }
  torch::set_num_threads(1);
  std::map<int, double> triad;
  for (const int threads : counts) triad[threads] = triadGBs(n, threads);
  std::vector<float> param(n, 0.5f), grad(n), copy32(n);
  std::vector<std::uint16_t> copy(n), low(n);
  for (std::size_t i = 0; i < n; ++i) grad[i] = 1e-3f * static_cast<float>(i % 1000) - 0.5f;

  std::printf("AdamW, %.0fM fp32 parameters; memory bandwidth (STREAM triad):", static_cast<double>(n) / 1e6);
  for (const auto& [threads, gbs] : triad) std::printf(" %.1f GB/s (%d threads)", gbs, threads);
  std::printf(
      "\n| implementation | threads | ms/step | Mparams/s | GB/s | %% of triad |\n|---|---:|---:|---:|---:|---:|\n");
  auto row = [&](const char* name, int threads, double seconds, double bytesPerParam) {
    const double gbs = bytesPerParam * static_cast<double>(n) / seconds / 1e9;
    std::printf("| %s | %d | %.1f | %.0f | %.1f | %.0f%% |\n", name, threads, seconds * 1e3,
                static_cast<double>(n) / seconds / 1e6, gbs, 100 * gbs / triad[threads]);
  };
  struct K {
    const char* name;
    rp::optim::AdamWKernel kernel;
    rp::optim::AdamW8Kernel kernel8;
  };
  std::vector<K> kernels{{"roundpipe scalar", &rp::optim::adamwScalar, &rp::optim::adamw8Scalar}};
  if (rp::optim::cpuRunsAvx2()) kernels.push_back({"roundpipe avx2", &rp::optim::adamwAvx2, nullptr});
  if (rp::optim::cpuRunsAvx512()) {
    kernels.push_back({"roundpipe avx512", &rp::optim::adamwAvx512, &rp::optim::adamw8Avx512});
  }
  for (const K& k : kernels) {
    for (const int threads : counts) {
      struct Variant {
        const char* name;
        bool withCopy, split, eightBit;
      };
      for (const Variant& v :
           {Variant{"", false, false, false}, Variant{" + bf16 copy", true, false, false},
            Variant{" split master", false, true, false}, Variant{" 8-bit states", false, false, true},
            Variant{" 8-bit states, split master", false, true, true}}) {
        const bool withCopy = v.withCopy, split = v.split;
        if ((withCopy || split) && k.kernel == &rp::optim::adamwScalar) continue;
        if (v.eightBit && k.kernel8 == nullptr) continue;  // the AVX2 machines run the scalar 8-bit kernel
        rp::optim::AdamWConfig config{1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}};
        config.stateBits = v.eightBit ? 8 : 32;
        rp::optim::AdamW adamw(config, k.kernel, k.kernel8 != nullptr ? k.kernel8 : &rp::optim::adamw8Scalar);
        adamw.setThreads(threads);
        if (split) {  // Note [Split master]: the bf16 weights and low words are the master
          adamw.addSplit("p", copy.data(), low.data(), grad.data(), n);
        } else {
          adamw.add("p", param.data(), grad.data(), n, withCopy ? copy.data() : nullptr,
                    withCopy ? rp::optim::ModelCopy::kBFloat16 : rp::optim::ModelCopy::kNone);
        }
        const double s = timeIt(5, [&] { adamw.step(1e-3); });
        // Reads param, grad, m, v; writes param, m, v (28 bytes); the bf16 copy writes 2 more. Split: reads the
        // weight, low word, grad, m, v; writes the weight, low word, m, v (28). 8-bit states: m and v a byte each
        // (16 bytes either way; the absmax, 8 bytes a block of 256, apart).
        row((std::string(k.name) + v.name).c_str(), threads, s, v.eightBit ? 16 : withCopy ? 30 : 28);
      }
    }
  }
  // LibTorch's AdamW (C++ frontend) on one parameter of the same size.
  for (const int threads : counts) {
    torch::set_num_threads(threads);
    torch::Tensor p = torch::full({static_cast<std::int64_t>(n)}, 0.5f).set_requires_grad(true);
    p.mutable_grad() = torch::from_blob(grad.data(), {static_cast<std::int64_t>(n)}, torch::kFloat).clone();
    torch::optim::AdamW opt({p}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
    const double s = timeIt(5, [&] { opt.step(); });
    row("LibTorch torch::optim::AdamW", threads, s, 28);
  }

  // One sync bf16 step's host passes, as the optimizer thread runs them over its slice.
  std::vector<std::uint16_t> slot(n);
  for (std::size_t i = 0; i < n; ++i) slot[i] = rp::optim::toBFloat16(grad[i]);
  std::printf("\nOne sync bf16 optimizer step's passes over %.0fM parameters (ms)\n", static_cast<double>(n) / 1e6);
  std::printf(
      "| threads | widen bf16 -> fp32 | sum of squares | widen with the norm's blocks | AdamW + clip + bf16 copy | all "
      "| ns per parameter | a separate clip pass (before 2026-11-27) | AdamW + clip, split master | all, split | ns "
      "per parameter, split | the norm's sums from the slot | AdamW split, gradient read in place | all, in place | ns "
      "per parameter, in place | the same, 8-bit states |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const int threads : counts) {
    const int parts = rp::parallel::partsFor(n, threads);
    const std::vector<rp::optim::GradBuffer> buffers{{grad.data(), n}};
    const double widen = timeIt(5, [&] {
      rp::parallel::forEachPart(parts, [&](int part) {
        const auto [begin, end] = rp::parallel::partOf(n, part, parts);
        for (std::size_t k = begin; k < end; ++k) grad[k] = rp::optim::fromBFloat16(slot[k]);
      });
    });
    double norm = 0;
    const double sum = timeIt(5, [&] { norm = std::sqrt(rp::optim::sumOfSquares(buffers, threads)); });
    // Note [Norm while widening]: each block's sum of squares right after the block is widened.
    constexpr std::size_t kBlock = rp::optim::kSumBlock;
    std::vector<double> blockSums((n + kBlock - 1) / kBlock);
    const double widenNorm = timeIt(5, [&] {
      rp::parallel::forEachPart(parts, [&](int part) {
        const auto [begin, end] = rp::parallel::partOf(n, part, parts, kBlock);
        for (std::size_t b = begin; b < end; b += kBlock) {
          const std::size_t len = std::min(kBlock, end - b);
          for (std::size_t k = b; k < b + len; ++k) grad[k] = rp::optim::fromBFloat16(slot[k]);
          blockSums[b / kBlock] = rp::optim::blockSumOfSquares(grad.data() + b, len);
        }
      });
    });
    rp::optim::AdamW adamw({1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}}, rp::optim::bestAdamWKernel());
    adamw.setThreads(threads);
    adamw.add("p", param.data(), grad.data(), n, copy.data(), rp::optim::ModelCopy::kBFloat16);
    const float coef = rp::optim::clipCoefficient(norm * 2, norm);  // clipping to half the norm
    const double update = timeIt(5, [&] { adamw.step(1e-3, coef); });
    // What the clip cost as a pass of its own, g *= coef in place, before Note [Clipping in the update].
    const double clip = timeIt(5, [&] {
      rp::parallel::forEachPart(parts, [&](int part) {
        const auto [begin, end] = rp::parallel::partOf(n, part, parts);
        for (std::size_t k = begin; k < end; ++k) grad[k] *= coef;
      });
    });
    // The same update on split masters (Note [Split master]): the weights and low words are the master.
    rp::optim::AdamW splitAdamw({1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}}, rp::optim::bestAdamWKernel());
    splitAdamw.setThreads(threads);
    splitAdamw.addSplit("p", copy.data(), low.data(), grad.data(), n);
    const double splitUpdate = timeIt(5, [&] { splitAdamw.step(1e-3, coef); });
    const double all = widenNorm + update, allSplit = widenNorm + splitUpdate;  // as the optimizer runs them
    // Note [Gradients read in place]: the norm's block sums and the update reading the bf16 slot itself; the same
    // with 8-bit states.
    const rp::optim::GradIn slotGrad(slot.data(), nullptr);
    const double slotNorm = timeIt(5, [&] {
      rp::parallel::forEachPart(parts, [&](int part) {
        const auto [begin, end] = rp::parallel::partOf(n, part, parts, kBlock);
        for (std::size_t b = begin; b < end; b += kBlock) {
          blockSums[b / kBlock] = rp::optim::blockSumOfSquares(slotGrad.from(b), std::min(kBlock, end - b));
        }
      });
    });
    double inPlace[2] = {0, 0};
    for (const int bits : {32, 8}) {
      rp::optim::AdamWConfig config{1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}};
      config.stateBits = bits;
      rp::optim::AdamW a(config, rp::optim::bestAdamWKernel(), rp::optim::bestAdamW8Kernel());
      a.setThreads(threads);
      a.addSplit("p", copy.data(), low.data(), slotGrad, n);
      inPlace[bits == 8 ? 1 : 0] = timeIt(5, [&] { a.step(1e-3, coef); });
    }
    const double allInPlace = slotNorm + inPlace[0];
    std::printf(
        "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f "
        "|\n",
        threads, widen * 1e3, sum * 1e3, widenNorm * 1e3, update * 1e3, all * 1e3, all / static_cast<double>(n) * 1e9,
        clip * 1e3, splitUpdate * 1e3, allSplit * 1e3, allSplit / static_cast<double>(n) * 1e9, slotNorm * 1e3,
        inPlace[0] * 1e3, allInPlace * 1e3, allInPlace / static_cast<double>(n) * 1e9,
        (slotNorm + inPlace[1]) / static_cast<double>(n) * 1e9);
  }

  // A rank's optimizer state for these parameters: float32 gradients and two moments. Each run allocates fresh
  // memory (malloc maps a buffer this large and unmaps it when freed), so every page is a first touch.
  const std::size_t state = 3 * n;
  const double stateBytes = static_cast<double>(state * sizeof(float));
  std::printf("\nZeroing the optimizer state of %.0fM parameters (%.2f GB)\n", static_cast<double>(n) / 1e6,
              stateBytes / 1e9);
  std::printf("| how | threads | ms | GB/s |\n|---|---:|---:|---:|\n");
  const auto zeroRow = [&](const char* how, int threads, double seconds) {
    std::printf("| %s | %d | %.1f | %.2f |\n", how, threads, seconds * 1e3, stateBytes / seconds / 1e9);
  };
  zeroRow("std::vector<float>(n, 0), fresh memory", 1, timeIt(5, [&] {
            std::vector<float> zeros(state, 0.0f);
            escape(zeros.data());
          }));
  std::vector<int> threadCounts{1, 2};
  if (rp::parallel::availableCores() > 2) threadCounts.push_back(rp::parallel::availableCores());
  for (int threads : threadCounts) {
    zeroRow("parallel::ZeroedFloats, fresh memory", threads, timeIt(5, [&] {
              rp::parallel::ZeroedFloats zeros(state, threads);
              escape(zeros.data());
            }));
  }
  rp::parallel::ZeroedFloats present(state, 1);
  zeroRow("parallel::fillZero, memory present (the limit)", 1,
          timeIt(5, [&] { rp::parallel::fillZero(present.data(), state * sizeof(float), 1); }));
  return 0;
}
