// Note [Split master] (optim/adamw.h): a float32 master kept as its bfloat16 rounding, its low 16 bits and a tie
// bit in v's sign. The encoding restores every float bit for bit; every kernel updates a split master exactly as
// it updates the float32 master with its bfloat16 copy; AdamW's checkpoint accessors move masters and tie bits in
// and out without changing a bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/adamw_simd.h"

namespace rp::optim {
namespace {

std::uint32_t bitsOf(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float floatOf(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// Every high half with the low halves at and around the rounding boundary and the ends: 393,216 floats, among
// them +-0, subnormals, the largest finite values (which round up to infinity) and the infinities.
TEST(AdamWSplit, EveryHighHalfAndBoundaryComesBackBitForBit) {
  int tiesUp = 0, tiesDown = 0;
  for (std::uint32_t high = 0; high <= 0xFFFF; ++high) {
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float x = floatOf(high << 16 | low);
      std::uint16_t weight, lowWord;
      const bool tie = splitMaster(x, weight, lowWord);
      ASSERT_EQ(weight, toBFloat16(x));
      const float back = joinMaster(weight, lowWord, tie);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(back)) << std::hex << bitsOf(x);
        continue;
      }
      ASSERT_EQ(bitsOf(back), bitsOf(x)) << std::hex << bitsOf(x);
      if (low == 0x8000u) (tie ? tiesUp : tiesDown) += 1;
    }
  }
  // Ties go both ways (to the even neighbour), so the low word alone could not restore them.
  EXPECT_GT(tiesUp, 30000);
  EXPECT_GT(tiesDown, 30000);
  // The bit is needed: at an even weight the two readings of a tie are two different floats that both round to it.
  const float down = joinMaster(0x3F80, 0x8000, false), up = joinMaster(0x3F80, 0x8000, true);
  EXPECT_NE(bitsOf(down), bitsOf(up));
  EXPECT_EQ(toBFloat16(down), 0x3F80);
  EXPECT_EQ(toBFloat16(up), 0x3F80);
}

// A tensor's state in both layouts, from the same masters: a quarter of them ties (low half 0x8000, high halves
// odd and even), some subnormal; a third of the gradients zero with zero moments, so that those masters stay
// ties when the step leaves them (decay 1) or move off them (decay < 1).
struct States {
  std::vector<float> param, grad, m, v, vmax, splitM, splitV, splitVmax;
  std::vector<std::uint16_t> copy, weights, low;
  explicit States(std::size_t n, unsigned seed) : param(n), grad(n), m(n), v(n), vmax(n), copy(n), weights(n), low(n) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d;
    for (std::size_t i = 0; i < n; ++i) {
      param[i] = d(gen);
      if (i % 4 == 1) param[i] = floatOf((bitsOf(param[i]) & 0xFFFF0000u) | 0x8000u);
      if (i % 17 == 3) param[i] = floatOf(bitsOf(param[i]) & 0x807FFFFFu);  // subnormal
      const bool still = i % 3 == 0;
      m[i] = still ? 0.0f : 0.1f * d(gen);
      v[i] = still ? 0.0f : std::abs(0.01f * d(gen));
      vmax[i] = v[i] * 2.0f;
      std::uint16_t w, l;
      splitMaster(param[i], w, l);
      copy[i] = w;
    }
    splitM = m;
    splitV = v;
    splitVmax = vmax;
    for (std::size_t i = 0; i < n; ++i) splitV[i] = withTieBit(v[i], splitMaster(param[i], weights[i], low[i]));
  }
  AdamWSlice full(bool amsgrad) {
    return {param.data(), grad.data(),         m.data(), v.data(), amsgrad ? vmax.data() : nullptr, param.size(),
            copy.data(),  ModelCopy::kBFloat16};
  }
  AdamWSlice split(bool amsgrad) {
    return {nullptr,      grad.data(),    splitM.data(),        splitV.data(), amsgrad ? splitVmax.data() : nullptr,
            param.size(), weights.data(), ModelCopy::kBFloat16, low.data()};
  }
};

std::vector<std::pair<const char*, AdamWKernel>> allKernels() {
  std::vector<std::pair<const char*, AdamWKernel>> out{{"scalar", &adamwScalar}};
  if (cpuRunsAvx2()) out.emplace_back("avx2", &adamwAvx2);
  if (cpuRunsAvx512()) out.emplace_back("avx512", &adamwAvx512);
  return out;
}

TEST(AdamWSplit, EveryKernelUpdatesASplitMasterAsTheFloat32One) {
  int tiesSeen = 0;
  for (const auto& [name, kernel] : allKernels()) {
    for (std::size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 33u, 1000u, 4099u}) {
      for (double weightDecay : {0.0, 0.05}) {
        for (bool amsgrad : {false, true}) {
          States a(n, static_cast<unsigned>(n));
          const AdamWConfig config{1e-2, 0.9, 0.999, 1e-8, weightDecay, amsgrad, {}};
          std::mt19937 gen(11);
          std::normal_distribution<float> d;
          for (std::int64_t step = 1; step <= 3; ++step) {
            for (std::size_t i = 0; i < n; ++i) a.grad[i] = i % 3 == 0 ? 0.0f : d(gen);
            const auto s = stepScalars(config, 1e-2, step);
            adamwScalar(s, amsgrad, a.full(amsgrad));
            kernel(s, amsgrad, a.split(amsgrad));
            for (std::size_t i = 0; i < n; ++i) {
              const bool tie = tieBit(a.splitV[i]);
              const float master = joinMaster(a.weights[i], a.low[i], tie);
              ASSERT_EQ(bitsOf(master), bitsOf(a.param[i])) << name << " n=" << n << " step " << step << " i=" << i;
              ASSERT_EQ(a.weights[i], a.copy[i]) << name << " i=" << i;
              ASSERT_EQ(bitsOf(a.splitM[i]), bitsOf(a.m[i])) << name << " i=" << i;
              ASSERT_EQ(bitsOf(withTieBit(a.splitV[i], false)), bitsOf(a.v[i])) << name << " i=" << i;
              if (amsgrad) {
                ASSERT_EQ(bitsOf(a.splitVmax[i]), bitsOf(a.vmax[i])) << name << " i=" << i;
              }
              // The bit is set for ties rounded up and nowhere else.
              const std::uint32_t bits = bitsOf(a.param[i]);
              ASSERT_EQ(tie, (bits & 0xFFFFu) == 0x8000u && a.copy[i] != (bits >> 16)) << name << " i=" << i;
              tiesSeen += tie ? 1 : 0;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tiesSeen, 100);  // the ties rounded up were exercised, on every kernel
}

// AdamW with split masters steps as with float32 masters and a bfloat16 copy; its checkpoint accessors read the
// masters back, and take the tie bits out of v (what a checkpoint saves) and put them back, bitwise.
TEST(AdamWSplit, AdamWStepsAndCheckpointsASplitMasterBitwise) {
  const std::size_t n = 5000;
  States a(n, 3);
  AdamWConfig config;
  config.weightDecay = 0.0;  // the masters of zero gradients stay where they start, a twelfth of them ties
  AdamW full(config, bestAdamWKernel()), split(config, bestAdamWKernel());
  full.setThreads(3);
  split.setThreads(3);
  full.add("w", a.param.data(), a.grad.data(), n, a.copy.data(), ModelCopy::kBFloat16);
  std::vector<std::uint16_t> weights(n), low(n);
  split.addSplit("w", weights.data(), low.data(), a.grad.data(), n);
  split.writeMaster(0, a.param.data());
  std::mt19937 gen(5);
  std::normal_distribution<float> d;
  std::vector<float> master(n);
  std::size_t tiesTaken = 0;
  for (int step = 0; step < 20; ++step) {
    for (std::size_t i = 0; i < n; ++i) a.grad[i] = i % 3 == 0 ? 0.0f : d(gen);
    full.step(1e-3, 0.5f);
    split.step(1e-3, 0.5f);
    split.readMaster(0, master.data());
    ASSERT_EQ(std::memcmp(master.data(), a.param.data(), n * 4), 0) << "step " << step;
    ASSERT_EQ(weights, a.copy) << "step " << step;
    const std::vector<std::size_t> ties = split.takeTieBits(0);
    tiesTaken += ties.size();
    ASSERT_EQ(std::memcmp(split.expAvgSq(0).data(), full.expAvgSq(0).data(), n * 4), 0) << "step " << step;
    ASSERT_EQ(std::memcmp(split.expAvg(0).data(), full.expAvg(0).data(), n * 4), 0) << "step " << step;
    split.setTieBits(0, ties);
    split.readMaster(0, master.data());
    ASSERT_EQ(std::memcmp(master.data(), a.param.data(), n * 4), 0) << "step " << step;
  }
  EXPECT_GT(tiesTaken, 0u);
}

// The checkpoint accessors on a tensor large enough for the optimizer's threads to split (partsFor: 256 Ki
// elements a part): the same masters and tie bits, in order, as one element at a time.
TEST(AdamWSplit, TheCheckpointAccessorsSplitOverThreadsAsOneThread) {
  const std::size_t n = 800000;
  std::vector<float> masters(n), grad(n, 0.0f), back(n);
  std::mt19937 gen(9);
  std::normal_distribution<float> d;
  for (std::size_t i = 0; i < n; ++i) {
    masters[i] = d(gen);
    if (i % 7 == 0) masters[i] = floatOf((bitsOf(masters[i]) & 0xFFFF0000u) | 0x8000u);  // ties, both ways
  }
  std::vector<std::uint16_t> weights(n), low(n);
  AdamW adamw(AdamWConfig{}, bestAdamWKernel());
  adamw.setThreads(3);
  adamw.addSplit("w", weights.data(), low.data(), grad.data(), n);
  adamw.writeMaster(0, masters.data());
  std::vector<std::size_t> expected;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t w, l;
    if (splitMaster(masters[i], w, l)) expected.push_back(i);
    ASSERT_EQ(weights[i], w);
    ASSERT_EQ(low[i], l);
  }
  ASSERT_GT(expected.size(), 10000u);
  adamw.readMaster(0, back.data());
  EXPECT_EQ(std::memcmp(back.data(), masters.data(), n * 4), 0);
  EXPECT_EQ(adamw.tieBits(0), expected);
  EXPECT_EQ(adamw.takeTieBits(0), expected);
  EXPECT_TRUE(adamw.tieBits(0).empty());
  adamw.setTieBits(0, expected);
  adamw.readMaster(0, back.data());
  EXPECT_EQ(std::memcmp(back.data(), masters.data(), n * 4), 0);
}

}  // namespace
}  // namespace rp::optim
