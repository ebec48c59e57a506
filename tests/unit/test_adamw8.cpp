// AdamW with 8-bit blockwise moments (Note [8-bit states], optim/blockwise8.cpp): which parameters take them, the
// same step on any number of threads, a split master beside a float32 one (Note [8-bit split master]), and the
// SIMD kernels equal to the scalar one. bitsandbytes itself is the golden tier's (tests/golden/test_golden_optim8.cpp).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"

namespace rp::optim {
namespace {

AdamWConfig eightBit() {
  AdamWConfig c;
  c.lr = 1e-3;
  c.weightDecay = 0.01;
  c.stateBits = 8;
  return c;
}

// A parameter and its gradients, seeded: weights ~ N(0, 0.02), gradients of two magnitudes by step.
struct Trajectory {
  std::vector<float> param, grad;
  std::mt19937 rng;
  explicit Trajectory(std::size_t n, unsigned seed = 1) : param(n), grad(n), rng(seed) {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : param) p = normal(rng);
  }
  void nextGrad(int step) {
    std::normal_distribution<float> normal(0.0f, step % 4 != 0 ? 1e-3f : 1e-1f);
    for (float& g : grad) g = normal(rng);
  }
};

TEST(AdamW8, TheLargeTensorsOtherThanEmbeddingsAndTheHeadTakeEightBits) {
  EXPECT_FALSE(eightBitStates("model.layers.0.mlp.up_proj.weight", 4095));
  EXPECT_TRUE(eightBitStates("model.layers.0.mlp.up_proj.weight", 4096));
  EXPECT_FALSE(eightBitStates("model.embed_tokens.weight", 1 << 20));
  EXPECT_FALSE(eightBitStates("lm_head.weight", 1 << 20));
  std::vector<float> big(8192), small(100), g(8192);
  AdamW adamw(eightBit());
  adamw.add("model.layers.0.mlp.up_proj.weight", big.data(), g.data(), big.size());
  adamw.add("model.norm.weight", small.data(), g.data(), small.size());
  EXPECT_TRUE(adamw.eightBit(0));
  EXPECT_TRUE(adamw.expAvg(0).empty());
  EXPECT_EQ(adamw.codesM(0).size(), 8192u);
  EXPECT_EQ(adamw.absmaxV(0).size(), 32u);
  EXPECT_FALSE(adamw.eightBit(1));
  EXPECT_EQ(adamw.expAvg(1).size(), 100u);
  AdamWConfig amsgrad = eightBit();
  amsgrad.amsgrad = true;
  EXPECT_ANY_THROW(AdamW{amsgrad});
}

// 800,077 elements (three parts of whole blocks and a short last block) on three threads equal one thread's step,
// bit for bit: every part starts on a block boundary.
TEST(AdamW8, ThreadsSplitWholeBlocksAndStepAsOneThread) {
  const std::size_t n = 800077;
  Trajectory one(n), three(n);
  AdamW a(eightBit()), b(eightBit());
  b.setThreads(3);
  a.add("w", one.param.data(), one.grad.data(), n);
  b.add("w", three.param.data(), three.grad.data(), n);
  for (int step = 1; step <= 3; ++step) {
    one.nextGrad(step);
    three.nextGrad(step);
    a.step(1e-3);
    b.step(1e-3);
  }
  EXPECT_EQ(std::memcmp(one.param.data(), three.param.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(a.codesM(0).data(), b.codesM(0).data(), n), 0);
  EXPECT_EQ(std::memcmp(a.codesV(0).data(), b.codesV(0).data(), n), 0);
  EXPECT_EQ(std::memcmp(a.absmaxM(0).data(), b.absmaxM(0).data(), 4 * q8::blocksOf(n)), 0);
  EXPECT_EQ(std::memcmp(a.absmaxV(0).data(), b.absmaxV(0).data(), 4 * q8::blocksOf(n)), 0);
}

// A split master with 8-bit moments beside a float32 master with its bfloat16 copy, 20 steps: the same codes,
// the same bfloat16 weights, and the masters bitwise equal but at the ties rounded up, which move one ulp (Note
// [8-bit split master]) and stay within a few — a few in a million a step.
TEST(AdamW8, ASplitMasterIsTheFloat32OneButAtItsTies) {
  const std::size_t n = 1 << 20;
  Trajectory f32(n, 7), split(n, 7);
  std::vector<std::uint16_t> copy(n), weights(n), low(n);
  for (std::size_t i = 0; i < n; ++i) {  // a bfloat16 start, as a run's masters are
    f32.param[i] = split.param[i] = fromBFloat16(toBFloat16(f32.param[i]));
    weights[i] = toBFloat16(f32.param[i]);
  }
  AdamW a(eightBit()), b(eightBit());
  a.add("w", f32.param.data(), f32.grad.data(), n, copy.data(), ModelCopy::kBFloat16);
  b.addSplit("w", weights.data(), low.data(), split.grad.data(), n);
  std::size_t nudged = 0;
  std::vector<float> masters(n), allowed(n, 0.0f);
  for (int step = 1; step <= 20; ++step) {
    f32.nextGrad(step);
    split.nextGrad(step);
    a.step(1e-3);
    b.step(1e-3);
    b.readMaster(0, masters.data());
    ASSERT_EQ(std::memcmp(a.codesM(0).data(), b.codesM(0).data(), n), 0) << "step " << step;
    ASSERT_EQ(std::memcmp(a.codesV(0).data(), b.codesV(0).data(), n), 0) << "step " << step;
    std::size_t apart = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (masters[i] == f32.param[i]) continue;
      ++apart;
      // The nudge's ulp carried through the steps' roundings: a few ulps of the master where it was nudged.
      if (allowed[i] == 0.0f) allowed[i] = std::ldexp(std::fabs(f32.param[i]), -21);
      ASSERT_LE(std::fabs(masters[i] - f32.param[i]), allowed[i]) << "element " << i << " step " << step;
    }
    nudged = std::max(nudged, apart);
    if (step == 1) {
      EXPECT_EQ(std::memcmp(copy.data(), weights.data(), 2 * n), 0);
    }
  }
  std::printf("masters a few ulp apart after 20 steps: %zu of %zu\n", nudged, n);
  EXPECT_GT(nudged, 0u) << "no tie was rounded up: the test does not reach the nudge";
  EXPECT_LE(nudged, n / 5000);
}

// The SIMD kernels (where this CPU runs them) equal the scalar one bit for bit: weights, float32 and split masters,
// bfloat16 and half copies, codes and absmax, on a short last block too.
TEST(AdamW8, SimdKernelsEqualTheScalarOne) {
  std::vector<std::pair<const char*, AdamW8Kernel>> kernels;
  if (cpuRunsAvx512()) kernels.emplace_back("avx512", &adamw8Avx512);
  if (kernels.empty()) GTEST_SKIP() << "this CPU runs no SIMD 8-bit kernel";
  const std::size_t n = 256 * 400 + 77;  // a few ties rounded up among the split runs
  for (const auto& [name, kernel] : kernels) {
    for (const ModelCopy copy : {ModelCopy::kNone, ModelCopy::kBFloat16, ModelCopy::kFloat16}) {
      for (const bool split : {false, true}) {
        if (split && copy != ModelCopy::kBFloat16) continue;
        SCOPED_TRACE(std::string(name) + (split ? " split" : "") + " copy " + std::to_string(static_cast<int>(copy)));
        Trajectory ref(n, 3), simd(n, 3);
        std::vector<std::uint16_t> refCopy(n), simdCopy(n), refLow(n), simdLow(n);
        AdamW a(eightBit(), &adamwScalar, &adamw8Scalar), b(eightBit(), &adamwScalar, kernel);
        if (split) {
          for (std::size_t i = 0; i < n; ++i) refCopy[i] = simdCopy[i] = toBFloat16(ref.param[i]);
          a.addSplit("w", refCopy.data(), refLow.data(), ref.grad.data(), n);
          b.addSplit("w", simdCopy.data(), simdLow.data(), simd.grad.data(), n);
        } else {
          a.add("w", ref.param.data(), ref.grad.data(), n, copy == ModelCopy::kNone ? nullptr : refCopy.data(), copy);
          b.add("w", simd.param.data(), simd.grad.data(), n, copy == ModelCopy::kNone ? nullptr : simdCopy.data(),
                copy);
        }
        for (int step = 1; step <= 5; ++step) {
          ref.nextGrad(step);
          simd.nextGrad(step);
          a.step(1e-3, 0.75f);
          b.step(1e-3, 0.75f);
        }
        EXPECT_EQ(std::memcmp(ref.param.data(), simd.param.data(), 4 * n), 0);
        EXPECT_EQ(std::memcmp(refCopy.data(), simdCopy.data(), 2 * n), 0);
        EXPECT_EQ(std::memcmp(refLow.data(), simdLow.data(), 2 * n), 0);
        EXPECT_EQ(std::memcmp(a.codesM(0).data(), b.codesM(0).data(), n), 0);
        EXPECT_EQ(std::memcmp(a.codesV(0).data(), b.codesV(0).data(), n), 0);
        EXPECT_EQ(std::memcmp(a.absmaxM(0).data(), b.absmaxM(0).data(), 4 * q8::blocksOf(n)), 0);
        EXPECT_EQ(std::memcmp(a.absmaxV(0).data(), b.absmaxV(0).data(), 4 * q8::blocksOf(n)), 0);
      }
    }
  }
}

// Note [Encode by regions]: the AVX-512 encode is the scalar one where it is hardest — every bound of both maps (the
// regions' edges among them) and its float neighbours, values that share its high half, every power of two from 2^-40
// to 1/2 and its neighbours (the binades' ends), each negated, zeros of either sign, ±1, a NaN, the smallest normal and
// a subnormal — and on random values, in blocks whose absmax is 1.
TEST(AdamW8, TheSimdEncodeIsTheScalarOneOnEveryBoundAndAroundIt) {
  if (!cpuRunsAvx512()) GTEST_SKIP() << "this CPU runs no SIMD 8-bit kernel";
  for (const bool isSigned : {true, false}) {
    const q8::Map& map = isSigned ? q8::signedMap() : q8::unsignedMap();
    std::vector<float> values = {0.0f,          -0.0f,           1.0f,  -1.0f, std::nextafter(1.0f, 0.0f),
                                 std::nanf(""), 1.17549435e-38f, 1e-40f};
    for (int e = -40; e < 0; ++e) {
      const float power = std::ldexp(1.0f, e);
      for (const float v : {power, std::nextafter(power, 0.0f), std::nextafter(power, 2.0f)}) values.push_back(v);
    }
    for (const float b : map.bounds) {
      std::uint32_t bits;
      std::memcpy(&bits, &b, 4);
      for (const std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0xFFFEu, 0xFFFFu}) {
        const std::uint32_t same = (bits & 0xFFFF0000u) | low;
        float v;
        std::memcpy(&v, &same, 4);
        values.push_back(v);
      }
      for (const float v : {b, std::nextafter(b, 0.0f), std::nextafter(b, 2.0f)}) values.push_back(v);
    }
    std::mt19937 gen(isSigned ? 1 : 2);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f), exponent(-9.0f, 0.0f);
    for (int i = 0; i < 4000; ++i) {
      values.push_back(uniform(gen));
      values.push_back(std::pow(10.0f, exponent(gen)));
    }
    const std::size_t count = values.size();
    for (std::size_t i = 0; i < count; ++i) values.push_back(-values[i]);
    std::size_t blocks = 0, differ = 0;
    for (std::size_t at = 0; at < values.size(); at += q8::kBlock - 1, ++blocks) {
      std::vector<float> block(q8::kBlock, 0.5f);
      block[0] = 1.0f;  // the absmax: the values are their own scaled ones
      for (std::size_t k = 1; k < q8::kBlock && at + k - 1 < values.size(); ++k) block[k] = values[at + k - 1];
      std::uint8_t scalar[q8::kBlock], simd[q8::kBlock];
      ASSERT_EQ(q8::quantizeBlock(map, block.data(), q8::kBlock, scalar), 1.0f);
      quantizeBlockAvx512(isSigned, block.data(), 1.0f, simd);
      for (std::size_t k = 0; k < q8::kBlock; ++k) {
        if (scalar[k] == simd[k]) continue;
        if (++differ <= 5) {
          ADD_FAILURE() << (isSigned ? "signed" : "unsigned") << " map: " << block[k] << " took code " << int{simd[k]}
                        << ", encode's " << int{scalar[k]};
        }
      }
    }
    EXPECT_EQ(differ, 0u) << blocks << " blocks";
  }
}

}  // namespace
}  // namespace rp::optim
