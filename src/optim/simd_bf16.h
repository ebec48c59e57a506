// The AVX-512 kernels' float32 -> bfloat16 rounding, shared by adamw_simd.cpp and adamw8_simd.cpp: to nearest
// even as toBFloat16 rounds (NaN -> 0x7FC0), 16 values, each in the low half of a 32-bit lane.
#pragma once

#include <immintrin.h>

namespace rp::optim {

__attribute__((target("avx512f,avx512bw"))) inline __m512i bfloat16BitsAvx512(__m512 p) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}

}  // namespace rp::optim
