// Host optimizer pieces whose reference is their definition: clipping, loss scaling, schedule edges.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/parallel.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace rp::optim {
namespace {

TEST(GradClip, TheCoefficientScalesToMaxNormAcrossBuffers) {
  std::vector<float> a{3.0f, 0.0f}, b{4.0f};
  std::vector<GradBuffer> grads{{a.data(), a.size()}, {b.data(), b.size()}};
  const double norm = globalGradNorm(grads);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  // torch.nn.utils.clip_grad_norm_: max_norm / (total_norm + 1e-6), clamped to 1.
  EXPECT_EQ(clipCoefficient(norm, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_NEAR(clipCoefficient(norm, 1.0) * norm, 1.0, 1e-6);
  EXPECT_EQ(clipCoefficient(norm, 10.0), 1.0f);  // below the limit nothing changes
  EXPECT_EQ(clipCoefficient(norm, 0.0), 1.0f);   // clipping off
  EXPECT_EQ(clipCoefficient(norm, -1.0), 1.0f);
}

TEST(OptimizerThreads, PartsCoverEveryElementOnceOnCacheLineBoundaries) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{16}, std::size_t{1000003}}) {
    for (const int parts : {1, 2, 3, 7, 16}) {
      std::size_t next = 0;
      for (int p = 0; p < parts; ++p) {
        const auto [begin, end] = parallel::partOf(n, p, parts);
        EXPECT_EQ(begin, next) << n << " in " << parts << ", part " << p;
        EXPECT_LE(begin, end);
        if (p + 1 < parts) {
          EXPECT_TRUE(end % 16 == 0 || end == n) << n << " in " << parts << ", part " << p;
        }
        next = end;
      }
      EXPECT_EQ(next, n) << n << " in " << parts;
    }
  }
  EXPECT_EQ(parallel::partsFor(1000, 16), 1);                  // a small pass stays on the calling thread
  EXPECT_EQ(parallel::partsFor(std::size_t{5} << 18, 16), 5);  // at least 256 Ki elements a part
  EXPECT_EQ(parallel::partsFor(std::size_t{1} << 30, 16), 16);
  EXPECT_EQ(parallel::partsFor(std::size_t{1} << 30, 0), 1);
}

TEST(OptimizerThreads, EachPartRunsOnceOnAThreadOfItsOwn) {
  std::mutex mutex;
  std::vector<int> seen;
  std::set<std::thread::id> threads;
  parallel::forEachPart(5, [&](int part) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(part);
    threads.insert(std::this_thread::get_id());
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(threads.size(), 5U);
  EXPECT_TRUE(threads.count(std::this_thread::get_id()));  // part 0 on the caller
}

// Note [Part threads]: consecutive passes of a thread run on the same threads (its pool), fewer parts than the pool
// has leave the rest idle, and a part 0 that makes a pass of its own (re-entered) finishes on threads of its own.
TEST(OptimizerThreads, PassesReuseTheCallersThreadsAndAReenteredPassStillFinishes) {
  // How many passes each part's thread has served (thread ids may be reused by new threads; this count may not).
  auto served = [](int parts) {
    static thread_local int passes = 0;
    std::vector<int> counts(static_cast<std::size_t>(parts));
    parallel::forEachPart(parts, [&](int part) { counts[static_cast<std::size_t>(part)] = ++passes; });
    return counts;
  };
  std::thread caller([&] {
    EXPECT_EQ(served(4), (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(served(4), (std::vector<int>{2, 2, 2, 2})) << "a second pass ran on new threads";
    EXPECT_EQ(served(2), (std::vector<int>{3, 3}));
    std::atomic<int> inner{0};
    parallel::forEachPart(3, [&](int part) {
      if (part == 0) parallel::forEachPart(3, [&](int) { ++inner; });  // re-entered from the caller's own part
    });
    EXPECT_EQ(inner.load(), 3);
  });
  caller.join();
}

TEST(OptimizerThreads, TheDefaultSharesTheCoresAmongTheNodesRanks) {
  const int cores = parallel::availableCores();
  ASSERT_GE(cores, 1);
  EXPECT_EQ(parallel::optimizerThreads(3, 8), 3);  // optim.threads set: taken as it is
  EXPECT_EQ(parallel::optimizerThreads(0, 1), cores);
  EXPECT_EQ(parallel::optimizerThreads(0, cores), 1);
  EXPECT_EQ(parallel::optimizerThreads(0, cores + 5), 1);
}

TEST(OptimizerThreads, FillZeroWritesItsRangeAndNothingElseOnAnyThreadCount) {
  // Unaligned start and length, long enough for several parts (at least 1 MiB each).
  const std::size_t total = std::size_t{9} << 20, offset = 4097 + 3, length = (std::size_t{7} << 20) + 1234;
  for (const int threads : {1, 2, 3, 8}) {
    std::vector<unsigned char> bytes(total, 0xAB);
    parallel::fillZero(bytes.data() + offset, length, threads);
    const auto firstNonZero =
        std::find_if(bytes.begin() + offset, bytes.begin() + offset + length, [](unsigned char b) { return b != 0; });
    EXPECT_EQ(firstNonZero - bytes.begin(), static_cast<std::ptrdiff_t>(offset + length)) << threads << " threads";
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.begin() + offset, [](unsigned char b) { return b == 0xAB; }));
    EXPECT_TRUE(std::all_of(bytes.begin() + offset + length, bytes.end(), [](unsigned char b) { return b == 0xAB; }));
  }
}

TEST(OptimizerThreads, ZeroedFloatsAreZeroEvenInMemoryUsedBefore) {
  const std::size_t n = (std::size_t{3} << 18) + 5;  // three parts
  for (int round = 0; round < 3; ++round) {
    {  // leave non-zero memory in malloc's free lists for the next allocation to reuse
      std::vector<float> used(n, 7.5f);
      EXPECT_EQ(used.back(), 7.5f);
    }
    parallel::ZeroedFloats zeroed(n, 1 + round);
    ASSERT_EQ(zeroed.size(), n);
    EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [](float x) { return x == 0.0f; })) << round;
    const float* where = zeroed.data();
    parallel::ZeroedFloats moved(std::move(zeroed));
    EXPECT_EQ(moved.data(), where);  // a move keeps the memory: the optimizer holds pointers into it
  }
  EXPECT_TRUE(parallel::ZeroedFloats().empty());
  EXPECT_TRUE(parallel::ZeroedFloats(0, 4).empty());
}

TEST(GradClip, TheNormDoesNotDependOnTheThreads) {
  // Three buffers, one spanning several of the norm's blocks, together enough for 8 parts.
  std::mt19937 gen(5);
  std::normal_distribution<float> d;
  std::vector<std::vector<float>> data{std::vector<float>(1500007), std::vector<float>(700001), std::vector<float>(3)};
  long double exact = 0;
  for (auto& v : data) {
    for (auto& x : v) {
      x = d(gen) * 1e-3f;
      exact += static_cast<long double>(x) * x;
    }
  }
  const auto buffersOf = [](std::vector<std::vector<float>>& v) {
    std::vector<GradBuffer> b;
    for (auto& x : v) b.push_back({x.data(), x.size()});
    return b;
  };
  const double one = sumOfSquares(buffersOf(data), 1);
  EXPECT_NEAR(one, static_cast<double>(exact), 1e-12 * static_cast<double>(exact));
  for (const int threads : {2, 3, 8}) EXPECT_EQ(sumOfSquares(buffersOf(data), threads), one) << threads << " threads";
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterInterval) {
  LossScaler scaler({1024.0, 2.0, 0.5, 3});
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1024.0);  // grew after 3 good steps
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skippedSteps(), 2);
  EXPECT_THROW(LossScaler({0.0, 2.0, 0.5, 3}), InputError);
}

TEST(LrSchedule, WarmupFloorAndNames) {
  const LrSchedule cosine{ScheduleKind::kCosine, 1.0, 4, 14, 0.1};
  EXPECT_DOUBLE_EQ(cosine.at(0), 0.0);
  EXPECT_DOUBLE_EQ(cosine.at(2), 0.5);
  EXPECT_DOUBLE_EQ(cosine.at(4), 1.0);
  EXPECT_NEAR(cosine.at(9), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(cosine.at(14), 0.1, 1e-12);
  EXPECT_NEAR(cosine.at(100), 0.1, 1e-12);
  EXPECT_EQ(parseScheduleKind("linear", "optim.schedule"), ScheduleKind::kLinear);
  try {
    parseScheduleKind("step", "optim.schedule");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optim.schedule = \"step\""), std::string::npos) << e.what();
  }
}

// Zero gradients with weight decay only shrink the parameters by (1 - lr*wd) per step.
TEST(AdamW, ZeroGradientIsPureDecoupledDecay) {
  std::vector<float> p{2.0f, -4.0f}, g{0.0f, 0.0f};
  AdamW adamw(AdamWConfig{0.1, 0.9, 0.999, 1e-8, 0.5, false, {}});
  adamw.add("p", p.data(), g.data(), p.size());
  adamw.step(0.1);
  adamw.step(0.1);
  EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f * 0.95f);
  EXPECT_FLOAT_EQ(p[1], -4.0f * 0.95f * 0.95f);
}

}  // namespace
}  // namespace rp::optim
