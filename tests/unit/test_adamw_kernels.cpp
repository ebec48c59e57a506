// The SIMD AdamW kernels against the scalar reference — bitwise, on sizes with SIMD tails, both lerp
// branches, amsgrad, and the fused bf16/fp16 model copy — and the model-copy roundings against LibTorch's
// own float -> bfloat16 / half conversions. Threads split the work without changing a bit. A gradient scale
// (the clipping coefficient) is the in-place clip before the update, bitwise. Gradients read from bfloat16 slots are
// their widened float32 sum, bitwise.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "model/libtorch.h"
#include "optim/adamw_simd.h"
#include "optim/grad_clip.h"

namespace rp::optim {
namespace {

struct Buffers {
  std::vector<float> param, grad, m, v, vmax;
  std::vector<std::uint16_t> copy;
  Buffers(std::size_t n, unsigned seed) : param(n), grad(n), m(n), v(n), vmax(n), copy(n) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d;
    for (std::size_t i = 0; i < n; ++i) {
      param[i] = d(gen);
      m[i] = 0.1f * d(gen);
      v[i] = std::abs(0.01f * d(gen));
      vmax[i] = v[i] * (i % 3 == 0 ? 2.0f : 0.5f);
    }
  }
  AdamWSlice slice(bool amsgrad, ModelCopy copyKind) {
    return {param.data(),
            grad.data(),
            m.data(),
            v.data(),
            amsgrad ? vmax.data() : nullptr,
            param.size(),
            copyKind == ModelCopy::kNone ? nullptr : copy.data(),
            copyKind};
  }
  bool operator==(const Buffers& o) const {
    auto same = [](const auto& a, const auto& b) {
      return std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    return same(param, o.param) && same(m, o.m) && same(v, o.v) && same(vmax, o.vmax) && same(copy, o.copy);
  }
};

std::vector<std::pair<const char*, AdamWKernel>> simdKernels() {
  std::vector<std::pair<const char*, AdamWKernel>> out;
  if (cpuRunsAvx2()) out.emplace_back("avx2", &adamwAvx2);
  if (cpuRunsAvx512()) out.emplace_back("avx512", &adamwAvx512);
  return out;
}

TEST(AdamWKernels, SimdEqualsScalarBitwise) {
  const auto kernels = simdKernels();
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  int cases = 0;
  for (const auto& [name, kernel] : kernels) {
    for (std::size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 100u, 1000u, 4099u}) {
      for (double beta1 : {0.9, 0.3}) {  // lerp weight 0.1 (m + w(g-m)) and 0.7 (g - (g-m)(1-w))
        for (bool amsgrad : {false, true}) {
          for (ModelCopy copy : {ModelCopy::kNone, ModelCopy::kBFloat16, ModelCopy::kFloat16}) {
            Buffers a(n, static_cast<unsigned>(n)), b(n, static_cast<unsigned>(n));
            const AdamWConfig config{1e-2, beta1, 0.999, 1e-8, 0.05, amsgrad, {}};
            std::mt19937 gen(7);
            std::normal_distribution<float> d;
            for (std::int64_t step = 1; step <= 3; ++step) {
              for (std::size_t i = 0; i < n; ++i) a.grad[i] = b.grad[i] = d(gen) * (i % 5 == 0 ? 1e-3f : 1.0f);
              const auto s = stepScalars(config, 1e-2, step);
              adamwScalar(s, amsgrad, a.slice(amsgrad, copy));
              kernel(s, amsgrad, b.slice(amsgrad, copy));
            }
            EXPECT_TRUE(a == b) << name << " n=" << n << " beta1=" << beta1 << " amsgrad=" << amsgrad
                                << " copy=" << static_cast<int>(copy);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

TEST(AdamWKernels, AGradientScaleIsAnInPlaceClipBeforeTheUpdateBitwise) {
  // Note [Clipping in the update]: scaling each gradient as the kernel reads it equals clip_grad_norm_'s
  // g *= coef followed by the plain update, on every kernel (SIMD bodies and scalar tails: n = 1003).
  auto kernels = simdKernels();
  kernels.emplace_back("scalar", &adamwScalar);
  const float coef = static_cast<float>(1.0 / (7.3 + 1e-6));
  for (const auto& [name, kernel] : kernels) {
    for (ModelCopy copy : {ModelCopy::kNone, ModelCopy::kBFloat16}) {
      const std::size_t n = 1003;
      Buffers fused(n, 11), clipped(n, 11), unclipped(n, 11);
      const AdamWConfig config{1e-2, 0.9, 0.999, 1e-8, 0.05, false, {}};
      std::mt19937 gen(3);
      std::normal_distribution<float> d;
      for (std::int64_t step = 1; step <= 3; ++step) {
        for (std::size_t i = 0; i < n; ++i) {
          fused.grad[i] = unclipped.grad[i] = 4.0f * d(gen);
          clipped.grad[i] = fused.grad[i] * coef;
        }
        const AdamWStepScalars plain = stepScalars(config, 1e-2, step);
        AdamWStepScalars scaled = plain;
        scaled.gradScale = coef;
        kernel(scaled, false, fused.slice(false, copy));
        kernel(plain, false, clipped.slice(false, copy));
        kernel(plain, false, unclipped.slice(false, copy));
      }
      EXPECT_TRUE(fused == clipped) << name << " copy=" << static_cast<int>(copy);
      EXPECT_FALSE(fused == unclipped) << name;  // the scale reaches the update
    }
  }
}

TEST(AdamWKernels, ModelCopyRoundsLikeLibTorch) {
  std::vector<float> values{0.0f,
                            -0.0f,
                            1.0f,
                            -1.5f,
                            3.14159265f,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            1e5f,
                            -1e5f,
                            6.1e-5f,
                            6.0e-5f,
                            5.96e-8f,
                            3.0e-8f,
                            1e-10f,
                            1.00390625f,
                            1.01171875f,
                            1e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min()};
  std::mt19937 gen(3);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {  // random bit patterns cover every exponent, halfway cases included
    const std::uint32_t b = bits(gen);
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isnan(f)) values.push_back(f);
  }
  const torch::Tensor t = torch::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, torch::kFloat);
  const torch::Tensor bf = t.to(torch::kBFloat16).contiguous(), half = t.to(torch::kHalf).contiguous();
  const auto* bfBits = static_cast<const std::uint16_t*>(bf.data_ptr());
  const auto* halfBits = static_cast<const std::uint16_t*>(half.data_ptr());
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(toBFloat16(values[i]), bfBits[i]) << values[i];
    ASSERT_EQ(toHalf(values[i]), halfBits[i]) << values[i];
  }
  EXPECT_EQ(toBFloat16(std::nanf("")), 0x7FC0);
}

// The async copy's pass (narrowFloats: the AVX2 rounding where the CPU has it) is the scalar rounding, bitwise,
// over random bit patterns (NaNs included), at every tail length.
TEST(AdamWKernels, TheNarrowingPassIsTheScalarRoundingBitwise) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> values(4099);
  for (auto& v : values) {
    const std::uint32_t b = bits(gen);
    std::memcpy(&v, &b, 4);
  }
  values[5] = std::nanf("");
  values[6] = std::numeric_limits<float>::infinity();
  values[9] = 1.00390625f;  // a bfloat16 tie
  for (const ModelCopy copy : {ModelCopy::kBFloat16, ModelCopy::kFloat16}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{23}, values.size()}) {
      std::vector<std::uint16_t> out(n + 1, 0xABCD);
      narrowFloats(out.data(), values.data(), n, copy);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], copy == ModelCopy::kBFloat16 ? toBFloat16(values[i]) : toHalf(values[i]))
            << "element " << i << " of " << n << (copy == ModelCopy::kBFloat16 ? " (bf16)" : " (fp16)");
      }
      EXPECT_EQ(out[n], 0xABCD) << "written past the end";
    }
  }
}

// Widening every one of the 65536 bit patterns gives LibTorch's float (NaNs stay NaN).
TEST(AdamWKernels, WideningEqualsLibTorch) {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const torch::Tensor wide = torch::from_blob(all.data(), {65536}, dtype).to(torch::kFloat).contiguous();
    const float* expected = wide.data_ptr<float>();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float got = dtype == torch::kHalf ? fromHalf(all[i]) : fromBFloat16(all[i]);
      if (std::isnan(expected[i])) {
        ASSERT_TRUE(std::isnan(got)) << i;
      } else {
        ASSERT_EQ(std::memcmp(&got, &expected[i], 4), 0) << i << ": " << got << " vs " << expected[i];
      }
    }
  }
}

TEST(AdamWKernels, ThreadsSplitTheWorkWithoutChangingABit) {
  const std::size_t n = (std::size_t{3} << 18) + 10007;  // three parts of at least parallel::partsFor's minimum
  Buffers a(n, 1), b(n, 1);
  std::mt19937 gen(2);
  std::normal_distribution<float> d;
  for (std::size_t i = 0; i < n; ++i) a.grad[i] = b.grad[i] = d(gen);
  AdamW one({1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}}, bestAdamWKernel());
  AdamW three({1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}}, bestAdamWKernel());
  three.setThreads(3);
  one.add("p", a.param.data(), a.grad.data(), n, a.copy.data(), ModelCopy::kBFloat16);
  three.add("p", b.param.data(), b.grad.data(), n, b.copy.data(), ModelCopy::kBFloat16);
  for (int step = 0; step < 3; ++step) {
    one.step(1e-3);
    three.step(1e-3);
  }
  EXPECT_EQ(std::memcmp(a.param.data(), b.param.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.copy.data(), b.copy.data(), n * sizeof(std::uint16_t)), 0);
  EXPECT_EQ(std::memcmp(one.expAvg(0).data(), three.expAvg(0).data(), n * sizeof(float)), 0);
}

// Note [Update by layer]: a step taken in groups, in another order, is step()'s bitwise — decayed and
// undecayed parameters, the bf16 copy, several threads. Dropping a group, or counting the step per group,
// fails it.
TEST(AdamWKernels, AStepInGroupsIsTheWholeStepBitwise) {
  const std::vector<std::size_t> sizes = {(std::size_t{1} << 19) + 3, 1000, (std::size_t{1} << 18) + 17};
  const std::vector<std::string> names = {"layers.0.mlp", "layers.0.norm.bias", "embed"};
  std::vector<Buffers> whole, grouped;
  AdamW a({1e-3, 0.9, 0.999, 1e-8, 0.1, false, {"bias"}}, bestAdamWKernel());
  AdamW b({1e-3, 0.9, 0.999, 1e-8, 0.1, false, {"bias"}}, bestAdamWKernel());
  b.setThreads(2);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    whole.emplace_back(sizes[i], 7 + static_cast<unsigned>(i));
    grouped.emplace_back(sizes[i], 7 + static_cast<unsigned>(i));
    std::mt19937 gen(static_cast<unsigned>(i));
    std::normal_distribution<float> d;
    for (std::size_t k = 0; k < sizes[i]; ++k) whole[i].grad[k] = grouped[i].grad[k] = d(gen);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    a.add(names[i], whole[i].param.data(), whole[i].grad.data(), sizes[i], whole[i].copy.data(), ModelCopy::kBFloat16);
    b.add(names[i], grouped[i].param.data(), grouped[i].grad.data(), sizes[i], grouped[i].copy.data(),
          ModelCopy::kBFloat16);
  }
  for (int step = 0; step < 3; ++step) {
    a.step(1e-3, 0.5f);
    const AdamW::Step s = b.beginStep(1e-3, 0.5f);
    b.update(s, {2});
    b.update(s, {1, 0});
  }
  EXPECT_EQ(b.stepCount(), 3);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(whole[i].param == grouped[i].param) << names[i];
    EXPECT_TRUE(whole[i].copy == grouped[i].copy) << names[i];
    EXPECT_EQ(std::memcmp(a.expAvgSq(i).data(), b.expAvgSq(i).data(), sizes[i] * sizeof(float)), 0) << names[i];
  }
}

// Note [Gradients read in place]: every kernel, 32- and 8-bit, reading its gradient from one or two bfloat16 slots
// is the same kernel reading their widened float32 sum (the first slot plus the second), bitwise, and so is the
// norm's block sum of squares — the plain master
// with its bf16 copy and the split master, on sizes with SIMD and block tails. A kernel dropping the second slot
// fails it (checked).
TEST(AdamWKernels, GradientsReadFromBfloat16SlotsAreTheirWidenedSumBitwise) {
  std::vector<std::tuple<const char*, AdamWKernel, AdamW8Kernel>> kernels = {{"scalar", &adamwScalar, &adamw8Scalar}};
  if (cpuRunsAvx2()) kernels.emplace_back("avx2", &adamwAvx2, &adamw8Scalar);
  if (cpuRunsAvx512()) kernels.emplace_back("avx512", &adamwAvx512, &adamw8Avx512);
  const std::size_t n = 4 * 256 + 77;  // 8-bit moments from 4,096 elements: a bigger tensor below
  int cases = 0;
  for (const auto& [name, kernel, kernel8] : kernels) {
    for (const int bits : {32, 8}) {
      for (const std::size_t slots : {1, 2}) {
        for (const bool split : {false, true}) {
          const std::size_t size = bits == 8 ? 16 * n : n;
          std::mt19937 gen(static_cast<unsigned>(slots * 10 + (split ? 1 : 0)));
          std::normal_distribution<float> d(0.0f, 0.02f);
          std::vector<std::uint16_t> first(size), second(size);
          std::vector<float> widened(size);
          for (std::size_t i = 0; i < size; ++i) {
            first[i] = toBFloat16(d(gen));
            second[i] = toBFloat16(d(gen));
            widened[i] = slots == 2 ? fromBFloat16(first[i]) + fromBFloat16(second[i]) : fromBFloat16(first[i]);
          }
          AdamWConfig config{1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}};
          config.stateBits = bits;
          AdamW viaFloat(config, kernel, kernel8), viaSlots(config, kernel, kernel8);
          Buffers a(size, 5), b(size, 5);
          for (std::size_t i = 0; i < size; ++i) a.copy[i] = b.copy[i] = toBFloat16(a.param[i]);
          const GradIn fromSlots(first.data(), slots == 2 ? second.data() : nullptr);
          std::vector<std::uint16_t> lowA(size), lowB(size);
          if (split) {
            viaFloat.addSplit("layers.0.w", a.copy.data(), lowA.data(), widened.data(), size);
            viaSlots.addSplit("layers.0.w", b.copy.data(), lowB.data(), fromSlots, size);
          } else {
            viaFloat.add("layers.0.w", a.param.data(), widened.data(), size, a.copy.data(), ModelCopy::kBFloat16);
            viaSlots.add("layers.0.w", b.param.data(), fromSlots, size, b.copy.data(), ModelCopy::kBFloat16);
          }
          ASSERT_EQ(viaSlots.eightBit(0), bits == 8);
          EXPECT_EQ(blockSumOfSquares(fromSlots, size), blockSumOfSquares(widened.data(), size));  // the norm's
          for (int step = 0; step < 3; ++step) {
            viaFloat.step(1e-3, 0.75f);
            viaSlots.step(1e-3, 0.75f);
          }
          const std::string what = fmt::format("{} {}-bit, {} slot(s){}", name, bits, slots, split ? ", split" : "");
          EXPECT_TRUE(a == b) << what;
          EXPECT_EQ(lowA, lowB) << what;
          if (bits == 8) {
            EXPECT_EQ(std::memcmp(viaFloat.codesM(0).data(), viaSlots.codesM(0).data(), size), 0) << what;
            EXPECT_EQ(std::memcmp(viaFloat.absmaxV(0).data(), viaSlots.absmaxV(0).data(),
                                  viaSlots.absmaxV(0).size() * sizeof(float)),
                      0)
                << what;
          } else {
            EXPECT_EQ(std::memcmp(viaFloat.expAvgSq(0).data(), viaSlots.expAvgSq(0).data(), size * sizeof(float)), 0)
                << what;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GE(cases, 8);
}

TEST(AdamWKernels, TheKernelCanBeForcedAndABadChoiceIsNamed) {
  ::setenv("RP_ADAMW_KERNEL", "scalar", 1);
  EXPECT_EQ(bestAdamWKernel(), &adamwScalar);
  ::setenv("RP_ADAMW_KERNEL", "sse9", 1);
  try {
    bestAdamWKernel();
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RP_ADAMW_KERNEL='sse9': expected scalar, avx2 or avx512"), std::string::npos)
        << e.what();
  }
  ::unsetenv("RP_ADAMW_KERNEL");
  EXPECT_NE(adamwKernelName(bestAdamWKernel()), nullptr);
}

}  // namespace
}  // namespace rp::optim
