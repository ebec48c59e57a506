// The AVX-512 8-bit AdamW kernel (Note [8-bit states]): adamw8Scalar's float32 operations in the same order, 16
// elements at a time, the codes read and written 32 at a time by 16-bit permutes over the maps' halves (Note [Encode
// by 16-bit keys]). Built with -ffp-contract=off, its fused multiply-adds explicit where the scalar kernel's std::fma
// are: bitwise equal to it (tests/unit/test_adamw8.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "common/error.h"
#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"
#include "optim/simd_bf16.h"

namespace rp::optim {
namespace {

// Note [Encode by 16-bit keys]
// encode (the number of a map's bounds below a scaled value) searches the bounds' high halves instead of the floats,
// 32 values at a time: a non-negative float's high 16 bits (sign, exponent, 7 mantissa bits) order it as the float
// does, so a bound whose high half is below the value's is below the value, one whose high half is above is above,
// and only a bound with the value's own high half can be either. Each map's 255 bounds have distinct high halves
// (checked as the keys are built), so at most one bound is in doubt: the search counts the halves below the value's
// (c), and where the bound at c has the value's high half, their low halves decide (an eighth of the values near
// the map's dense end share a bound's high half, so this is vector work too, not a rare lane). The signed map is
// searched on |x| over its 128 positive bounds, which the negative ones mirror exactly ((-a + -b) / 2 is -((a + b) /
// 2)): x >= 0 takes 127 + (positive bounds below x), x < 0 takes 127 - (positive bounds at or below |x|, the first 127
// of them) — a value on a bound takes the lower code either way. Bitwise encode's (tests/unit/test_adamw8.cpp; the
// goldens against bitsandbytes).
//
// A map's keys: the search's probes level by level (level l probes the bound at p * 2^(L-l) + 2^(L-1-l) - 1 for
// the code prefix p of its first l levels, of L), and every bound's key in order for the check.
struct Keys {
  alignas(64) std::uint16_t level[8][128];
  alignas(64) std::uint16_t all[256];  // past the last bound: 0xFFFF, the key of no non-negative value
  alignas(64) std::uint16_t low[256];  // every bound's low half
};
Keys makeKeys(const float* bounds, int count, int levels) {
  Keys t{};
  std::fill(std::begin(t.all), std::end(t.all), std::uint16_t{0xFFFF});
  for (int i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, bounds + i, 4);
    t.all[i] = static_cast<std::uint16_t>(bits >> 16);
    t.low[i] = static_cast<std::uint16_t>(bits);
    RP_CHECK(bounds[i] > 0.0f && (i == 0 || t.all[i] > t.all[i - 1]),
             "8-bit encode: the map's bound {} ({}) has no key of its own", i, bounds[i]);
  }
  for (int l = 0; l < levels; ++l) {
    for (int p = 0; p < (1 << l); ++p) t.level[l][p] = t.all[p * (1 << (levels - l)) + (1 << (levels - 1 - l)) - 1];
  }
  return t;
}
const Keys& unsignedKeys() {  // v: all 255 bounds, eight levels
  static const Keys keys = makeKeys(q8::unsignedMap().bounds.data(), 255, 8);
  return keys;
}
const Keys& signedKeys() {  // m: the 128 positive bounds, the first 127 in seven levels
  static const Keys keys = makeKeys(q8::signedMap().bounds.data() + 127, 128, 7);
  return keys;
}

__attribute__((target("avx512f,avx512bw"))) inline __m512i load16(const std::uint16_t* at) {
  return _mm512_load_si512(at);
}
// How many of the level tables' keys are below `key`, per lane: the code's search on 16-bit keys.
template <int kLevels>
__attribute__((target("avx512f,avx512bw"))) inline __m512i searchKeys(const Keys& t, __m512i key) {
  __m512i p = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi16(1);
  for (int l = 0; l < kLevels; ++l) {
    const std::uint16_t* probes = t.level[l];
    __m512i bound;
    if (l <= 5) {
      bound = _mm512_permutexvar_epi16(p, load16(probes));
    } else if (l == 6) {
      bound = _mm512_permutex2var_epi16(load16(probes), p, load16(probes + 32));
    } else {
      const __m512i low = _mm512_permutex2var_epi16(load16(probes), p, load16(probes + 32));
      const __m512i high = _mm512_permutex2var_epi16(load16(probes + 64), p, load16(probes + 96));
      bound = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(p, _mm512_set1_epi16(64)), low, high);
    }
    p = _mm512_add_epi16(p, p);
    p = _mm512_mask_add_epi16(p, _mm512_cmplt_epu16_mask(bound, key), p, one);
  }
  return p;
}
// table[c] per lane (c < 256; with kEntries 128, c's low 7 bits).
template <int kEntries>
__attribute__((target("avx512f,avx512bw"))) inline __m512i lookup(const std::uint16_t* table, __m512i c) {
  const __mmask32 b6 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(64));
  const __m512i first = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(load16(table), c, load16(table + 32)),
                                                _mm512_permutex2var_epi16(load16(table + 64), c, load16(table + 96)));
  if (kEntries == 128) return first;
  const __m512i second =
      _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(load16(table + 128), c, load16(table + 160)),
                              _mm512_permutex2var_epi16(load16(table + 192), c, load16(table + 224)));
  return _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, _mm512_set1_epi16(128)), first, second);
}

// The values of 32 codes (decode's, bitwise): the map's floats kept as their high and low halves, each looked up as
// 16-bit words (Note [Encode by 16-bit keys]) and the two interleaved into floats. Lookups without gathers: a gather
// of 16 lanes cost more than the rest of the update on this Zen 4; 32-bit permutes over the 256 floats were twice
// this.
struct Halves {
  alignas(64) std::uint16_t high[256], low[256];
};
Halves halvesOf(const q8::Map& map) {
  Halves h{};
  for (int i = 0; i < 256; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &map.code[static_cast<std::size_t>(i)], 4);
    h.high[i] = static_cast<std::uint16_t>(bits >> 16);
    h.low[i] = static_cast<std::uint16_t>(bits);
  }
  return h;
}
const Halves& signedHalves() {
  static const Halves h = halvesOf(q8::signedMap());
  return h;
}
const Halves& unsignedHalves() {
  static const Halves h = halvesOf(q8::unsignedMap());
  return h;
}
__attribute__((target("avx512f,avx512bw"))) inline void decode32(const Halves& h, const std::uint8_t* codes,
                                                                 __m512& first, __m512& second) {
  const __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  const __m512i high = lookup<256>(h.high, q), low = lookup<256>(h.low, q);
  // Word 2j of float j its low half, 2j + 1 its high one: low[j] and high[j] (index 32 + j).
  const __m512i firstWords = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                              6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i secondWords = _mm512_add_epi16(firstWords, _mm512_set1_epi16(16));
  first = _mm512_castsi512_ps(_mm512_permutex2var_epi16(low, firstWords, high));
  second = _mm512_castsi512_ps(_mm512_permutex2var_epi16(low, secondWords, high));
}

// A whole block's values into codes, as quantizeBlock: scaled by the reciprocal of max(absmax, 1e-38), clamped (a
// NaN to -1, whose code is encode's 0 for NaN), then 32 at a time by their halves (Note [Encode by 16-bit keys]).
template <bool kSigned>
__attribute__((target("avx512f,avx512bw"))) inline void quantize256(const float* x, float absmax, std::uint8_t* out) {
  const Keys& t = kSigned ? signedKeys() : unsignedKeys();
  const __m512 r = _mm512_set1_ps(1.0f / std::max(absmax, 1e-38f));
  const __m512 lo = _mm512_set1_ps(-1.0f), hi = _mm512_set1_ps(1.0f);
  // The words of 16 + 16 floats: the high halves at odd positions, the low ones at even.
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                       23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i even = _mm512_sub_epi16(odd, _mm512_set1_epi16(1));
  const __m512i signBit = _mm512_set1_epi16(static_cast<short>(0x8000)), one = _mm512_set1_epi16(1);
  for (std::size_t k = 0; k < q8::kBlock; k += 32) {
    const __m512i a =
        _mm512_castps_si512(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), r), lo), hi));
    const __m512i b =
        _mm512_castps_si512(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k + 16), r), lo), hi));
    const __m512i halves = _mm512_permutex2var_epi16(a, odd, b), lows = _mm512_permutex2var_epi16(a, even, b);
    const __mmask32 negative = _mm512_test_epi16_mask(halves, signBit);
    __m512i c;
    if constexpr (kSigned) {
      const __m512i key = _mm512_andnot_si512(signBit, halves);
      c = searchKeys<7>(t, key);
      const __mmask32 top = ~negative & _mm512_cmplt_epu16_mask(_mm512_set1_epi16(static_cast<short>(t.all[127])), key);
      c = _mm512_mask_add_epi16(c, top, c, one);
      // In doubt: the bound at c (for x < 0, one of the first 127); below |x| (x >= 0) or at or below it (x < 0).
      const __mmask32 doubt = _mm512_cmpeq_epi16_mask(lookup<128>(t.all, c), key) &
                              ~(negative & _mm512_cmpeq_epi16_mask(c, _mm512_set1_epi16(127)));
      const __m512i low = lookup<128>(t.low, c);
      const __mmask32 below =
          (~negative & _mm512_cmplt_epu16_mask(low, lows)) | (negative & _mm512_cmple_epu16_mask(low, lows));
      c = _mm512_mask_add_epi16(c, doubt & below, c, one);
      const __m512i middle = _mm512_set1_epi16(127);
      c = _mm512_mask_sub_epi16(_mm512_add_epi16(middle, c), negative, middle, c);
    } else {
      c = searchKeys<8>(t, halves);
      const __mmask32 doubt = ~negative & _mm512_cmpeq_epi16_mask(lookup<256>(t.all, c), halves);
      c = _mm512_mask_add_epi16(c, doubt & _mm512_cmplt_epu16_mask(lookup<256>(t.low, c), lows), c, one);
      c = _mm512_maskz_mov_epi16(~negative, c);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi16_epi8(c));
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bw"))) void quantizeBlockAvx512(bool isSigned, const float* x, float absmax,
                                                                     std::uint8_t* out) {
  if (isSigned) return quantize256<true>(x, absmax, out);
  quantize256<false>(x, absmax, out);
}

__attribute__((target("avx512f,avx512bw,avx2,f16c,fma"))) void adamw8Avx512(const AdamWStepScalars& s,
                                                                            const AdamW8Slice& x) {
  const Halves &mCode = signedHalves(), &vCode = unsignedHalves();
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
    __m512 mCodes[2], vCodes[2];
    for (std::size_t k = 0; k < q8::kBlock; k += 16) {
      const std::size_t i = b * q8::kBlock + k;
      if (k % 32 == 0) {
        decode32(mCode, x.m + i, mCodes[0], mCodes[1]);
        decode32(vCode, x.v + i, vCodes[0], vCodes[1]);
      }
      const __m512 g = _mm512_mul_ps(gradAvx512(grad, i), gradScale);
      const __m512 mOld = _mm512_mul_ps(mCodes[k % 32 / 16], am);
      const __m512 vOld = _mm512_mul_ps(vCodes[k % 32 / 16], av);
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
    quantize256<true>(m, absM, x.m + b * q8::kBlock);
    quantize256<false>(v, absV, x.v + b * q8::kBlock);
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
