// What the AVX-512 kernels of adamw_simd.cpp and adamw8_simd.cpp share: the float32 -> bfloat16 rounding, to nearest
// even as toBFloat16 rounds (NaN -> 0x7FC0), 16 values, each in the low half of a 32-bit lane; and the gradient's
// read, GradIn::at 16 (or 8) values at a time.
#pragma once

#include <immintrin.h>

#include "optim/adamw.h"

namespace rp::optim {

__attribute__((target("avx512f,avx512bw"))) inline __m512i bfloat16BitsAvx512(__m512 p) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}

// Widened bfloat16 values: their bits in the high half of a float32.
__attribute__((target("avx512f,avx512bw"))) inline __m512 widenBf16Avx512(const std::uint16_t* at) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at))), 16));
}
__attribute__((target("avx512f,avx512bw"))) inline __m512 gradAvx512(const GradIn& g, std::size_t i) {
  if (g.f32 != nullptr) return _mm512_loadu_ps(g.f32 + i);
  const __m512 first = widenBf16Avx512(g.bf16[0] + i);
  return g.bf16[1] != nullptr ? _mm512_add_ps(first, widenBf16Avx512(g.bf16[1] + i)) : first;
}
__attribute__((target("avx2"))) inline __m256 widenBf16Avx2(const std::uint16_t* at) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at))), 16));
}
__attribute__((target("avx2"))) inline __m256 gradAvx2(const GradIn& g, std::size_t i) {
  if (g.f32 != nullptr) return _mm256_loadu_ps(g.f32 + i);
  const __m256 first = widenBf16Avx2(g.bf16[0] + i);
  return g.bf16[1] != nullptr ? _mm256_add_ps(first, widenBf16Avx2(g.bf16[1] + i)) : first;
}

}  // namespace rp::optim
