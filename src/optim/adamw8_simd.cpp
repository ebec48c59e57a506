// The AVX-512 8-bit AdamW kernel (Note [8-bit states]): adamw8Scalar's float32 operations in the same order, 16
// elements at a time, the codes read and written with the maps held in registers. Built with -ffp-contract=off, its
// fused multiply-adds explicit where the scalar kernel's std::fma are: bitwise equal to it (tests/unit/
// test_adamw8.cpp).
#include <immintrin.h>

#include <algorithm>

#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"
#include "optim/simd_bf16.h"

namespace rp::optim {
namespace {

// Lookups without gathers (a gather of 16 lanes costs more than the rest of the update on Zen 4): the maps and
// their bounds held in registers, indexed with permutes.
//
// The 256 values of a map: 8 permutex2var of 32 entries each, chosen by the index's top 3 bits.
struct Code256 {
  __m512 part[16];
};
__attribute__((target("avx512f,avx512bw"))) inline Code256 loadCode(const q8::Map& map) {
  Code256 c;
  for (int k = 0; k < 16; ++k) c.part[k] = _mm512_loadu_ps(map.code.data() + 16 * k);
  return c;
}
__attribute__((target("avx512f,avx512bw"))) inline __m512 decode16(const Code256& c, __m512i q) {
  __m512 v[8];
  for (int k = 0; k < 8; ++k) v[k] = _mm512_permutex2var_ps(c.part[2 * k], q, c.part[2 * k + 1]);
  const __mmask16 b5 = _mm512_test_epi32_mask(q, _mm512_set1_epi32(32)),
                  b6 = _mm512_test_epi32_mask(q, _mm512_set1_epi32(64)),
                  b7 = _mm512_test_epi32_mask(q, _mm512_set1_epi32(128));
  for (int k = 0; k < 4; ++k) v[k] = _mm512_mask_blend_ps(b5, v[2 * k], v[2 * k + 1]);
  for (int k = 0; k < 2; ++k) v[k] = _mm512_mask_blend_ps(b6, v[2 * k], v[2 * k + 1]);
  return _mm512_mask_blend_ps(b7, v[0], v[1]);
}

// encode's binary search level by level: at level l (0-7) the bound probed for the prefix p of the code's top l
// bits is bounds[p * 2^(8-l) + 2^(7-l) - 1]; each level's probes sit in registers (16 of them at level 7).
struct Bounds256 {
  __m512 level[8][8];  // level l: max(1, 2^l / 16) registers
};
__attribute__((target("avx512f,avx512bw"))) inline Bounds256 loadBounds(const q8::Map& map) {
  Bounds256 t;
  for (int l = 0; l < 8; ++l) {
    alignas(64) float probes[128] = {};
    const int count = 1 << l;
    for (int p = 0; p < count; ++p) probes[p] = map.bounds[static_cast<std::size_t>(p * (256 >> l) + (128 >> l) - 1)];
    for (int r = 0; r < std::max(1, count / 16); ++r) t.level[l][r] = _mm512_load_ps(probes + 16 * r);
  }
  return t;
}
__attribute__((target("avx512f,avx512bw"))) inline __m512i encode16(const Bounds256& t, __m512 scaled) {
  __m512i p = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  for (int l = 0; l < 8; ++l) {
    __m512 bound;
    if (l <= 4) {
      bound = _mm512_permutexvar_ps(p, t.level[l][0]);
    } else if (l == 5) {
      bound = _mm512_permutex2var_ps(t.level[5][0], p, t.level[5][1]);
    } else {
      const int pairs = l == 6 ? 2 : 4;
      __m512 v[4];
      for (int k = 0; k < pairs; ++k) v[k] = _mm512_permutex2var_ps(t.level[l][2 * k], p, t.level[l][2 * k + 1]);
      const __mmask16 b5 = _mm512_test_epi32_mask(p, _mm512_set1_epi32(32));
      if (l == 6) {
        bound = _mm512_mask_blend_ps(b5, v[0], v[1]);
      } else {
        const __mmask16 b6 = _mm512_test_epi32_mask(p, _mm512_set1_epi32(64));
        bound = _mm512_mask_blend_ps(b6, _mm512_mask_blend_ps(b5, v[0], v[1]), _mm512_mask_blend_ps(b5, v[2], v[3]));
      }
    }
    p = _mm512_add_epi32(p, p);
    p = _mm512_mask_add_epi32(p, _mm512_cmp_ps_mask(bound, scaled, _CMP_LT_OQ), p, one);
  }
  return p;
}

// A whole block's values into codes, as quantizeBlock: scaled by the reciprocal of max(absmax, 1e-38), clamped.
__attribute__((target("avx512f,avx512bw"))) inline void quantize256(const Bounds256& t, const float* x, float absmax,
                                                                    std::uint8_t* out) {
  const __m512 r = _mm512_set1_ps(1.0f / std::max(absmax, 1e-38f));
  const __m512 lo = _mm512_set1_ps(-1.0f), hi = _mm512_set1_ps(1.0f);
  for (std::size_t k = 0; k < q8::kBlock; k += 16) {
    const __m512 scaled = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), r), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm512_cvtepi32_epi8(encode16(t, scaled)));
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx2,f16c,fma"))) void adamw8Avx512(const AdamWStepScalars& s,
                                                                            const AdamW8Slice& x) {
  const Code256 mCode = loadCode(q8::signedMap()), vCode = loadCode(q8::unsignedMap());
  const Bounds256 mBounds = loadBounds(q8::signedMap()), vBounds = loadBounds(q8::unsignedMap());
  const __m512 decay = _mm512_set1_ps(s.decay), beta1 = _mm512_set1_ps(s.beta1), omb1 = _mm512_set1_ps(s.oneMinusBeta1),
               beta2 = _mm512_set1_ps(s.beta2), omb2 = _mm512_set1_ps(s.oneMinusBeta2),
               step = _mm512_set1_ps(-s.stepSize), bc2 = _mm512_set1_ps(s.biasCorrection2Sqrt),
               eps = _mm512_set1_ps(s.eps), gradScale = _mm512_set1_ps(s.gradScale);
  const GradIn grad = x.grad;  // a local: the stores below cannot alias it
  const bool split = x.masterLow != nullptr;
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x8000), lowMask = _mm512_set1_epi32(0xFFFF),
                absMask = _mm512_set1_epi32(0x7FFFFFFF);
  alignas(64) float m[q8::kBlock], v[q8::kBlock];
  const std::size_t whole = x.n / q8::kBlock;
  for (std::size_t b = 0; b < whole; ++b) {
    const __m512 am = _mm512_set1_ps(x.absmaxM[b]), av = _mm512_set1_ps(x.absmaxV[b]);
    __m512 maxM = _mm512_setzero_ps(), maxV = _mm512_setzero_ps();
    for (std::size_t k = 0; k < q8::kBlock; k += 16) {
      const std::size_t i = b * q8::kBlock + k;
      const __m512i qm = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.m + i)));
      const __m512i qv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.v + i)));
      const __m512 g = _mm512_mul_ps(gradAvx512(grad, i), gradScale);
      const __m512 mOld = _mm512_mul_ps(decode16(mCode, qm), am);
      const __m512 vOld = _mm512_mul_ps(decode16(vCode, qv), av);
      const __m512 mNew = _mm512_fmadd_ps(omb1, g, _mm512_mul_ps(mOld, beta1));
      const __m512 vNew = _mm512_fmadd_ps(_mm512_mul_ps(omb2, g), g, _mm512_mul_ps(vOld, beta2));
      _mm512_store_ps(m + k, mNew);
      _mm512_store_ps(v + k, vNew);
      // std::max(absmax, |x|) keeps absmax where x is NaN; max_ps returns its second operand then.
      maxM = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(mNew), absMask)), maxM);
      maxV = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(vNew), absMask)), maxV);
      const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vNew), bc2), eps);
      __m512 p;
      if (split) {  // joinMaster without a tie bit (Note [8-bit split master])
        const __m512i weight =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.modelCopy + i)));
        const __m512i low =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.masterLow + i)));
        const __m512i high = _mm512_mask_sub_epi32(weight, _mm512_cmpgt_epu32_mask(low, half), weight, one);
        p = _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(high, 16), low));
      } else {
        p = _mm512_loadu_ps(x.param + i);
      }
      p = _mm512_mul_ps(p, decay);
      p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(step, mNew), denom));
      if (!split) _mm512_storeu_ps(x.param + i, p);
      if (x.copy == ModelCopy::kBFloat16) {
        const __m512i bits = _mm512_castps_si512(p);
        const __m512i r = bfloat16BitsAvx512(p);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.modelCopy + i), _mm512_cvtepi32_epi16(r));
        if (split) {  // a tie rounded up is stored 0x8001 (Note [8-bit split master])
          __m512i low = _mm512_and_si512(bits, lowMask);
          const __mmask16 tie =
              _mm512_cmpeq_epi32_mask(low, half) & _mm512_cmpneq_epi32_mask(r, _mm512_srli_epi32(bits, 16));
          low = _mm512_mask_add_epi32(low, tie, low, one);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.masterLow + i), _mm512_cvtepi32_epi16(low));
        }
      } else if (x.copy == ModelCopy::kFloat16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.modelCopy + i),
                            _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    }
    const float absM = _mm512_reduce_max_ps(maxM), absV = _mm512_reduce_max_ps(maxV);
    x.absmaxM[b] = absM;
    x.absmaxV[b] = absV;
    quantize256(mBounds, m, absM, x.m + b * q8::kBlock);
    quantize256(vBounds, v, absV, x.v + b * q8::kBlock);
  }
  if (whole * q8::kBlock < x.n) {  // the tensor's short last block
    const std::size_t at = whole * q8::kBlock;
    adamw8Scalar(s, AdamW8Slice{x.param != nullptr ? x.param + at : nullptr, x.grad.from(at), x.m + at, x.v + at,
                                x.absmaxM + whole, x.absmaxV + whole, x.n - at,
                                x.modelCopy != nullptr ? x.modelCopy + at : nullptr, x.copy,
                                x.masterLow != nullptr ? x.masterLow + at : nullptr});
  }
}

}  // namespace rp::optim
