// Note [Encode by regions]: the AVX-512 encode is encode's on every float in [-1, 1], both maps — 4.3 billion values,
// ~50 s on one core, so labelled long (scripts/test.sh --all); tests/unit/test_adamw8.cpp checks the hard ones in the
// default suite.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"

namespace rp::optim {
namespace {

TEST(EncodeEveryFloat, TheSimdEncodeIsTheScalarOneOnEveryFloatInMinusOneToOne) {
  if (!cpuRunsAvx512()) GTEST_SKIP() << "this CPU runs no SIMD 8-bit kernel";
  constexpr std::uint32_t kOne = 0x3F800000u;  // 1.0f: every non-negative float up to it, then each negated
  for (const bool isSigned : {true, false}) {
    const q8::Map& map = isSigned ? q8::signedMap() : q8::unsignedMap();
    std::vector<float> block(q8::kBlock);
    std::uint8_t simd[q8::kBlock];
    std::uint64_t differ = 0;
    // Each block: absmax 1 first, then 127 consecutive floats and the same negated.
    for (std::uint64_t from = 0; from <= kOne; from += 127) {
      block[0] = 1.0f;
      for (std::size_t k = 1; k < q8::kBlock; ++k) {
        std::uint32_t bits = static_cast<std::uint32_t>(std::min<std::uint64_t>(from + (k - 1) % 127, kOne));
        if (k >= 128) bits |= 0x80000000u;
        std::memcpy(&block[k], &bits, 4);
      }
      quantizeBlockAvx512(isSigned, block.data(), 1.0f, simd);
      for (std::size_t k = 0; k < q8::kBlock; ++k) {
        if (simd[k] == q8::encode(map, block[k])) continue;
        if (++differ <= 5) {
          ADD_FAILURE() << (isSigned ? "signed" : "unsigned") << " map: " << block[k] << " took code " << int{simd[k]}
                        << ", encode's " << int{q8::encode(map, block[k])};
        }
      }
    }
    EXPECT_EQ(differ, 0u);
  }
}

}  // namespace
}  // namespace rp::optim
