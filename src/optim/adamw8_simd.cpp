// The AVX-512 8-bit AdamW kernel (Note [8-bit states]): adamw8Scalar's float32 operations in the same order, 16
// elements at a time, the codes read 32 at a time by 16-bit permutes over the maps' halves and written 16 at a time
// by regions (Note [Encode by regions]). Built with -ffp-contract=off, its fused multiply-adds explicit where the
// scalar kernel's std::fma are: bitwise equal to it (tests/unit/test_adamw8.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "optim/adamw_simd.h"
#include "optim/blockwise8.h"
#include "optim/simd_bf16.h"

namespace rp::optim {
namespace {

// Note [Encode by regions]
// encode (the number of a map's bounds below a scaled value) is computed, not searched. The bounds fall into a few
// regions whose inner bounds are evenly spaced: each map's bounds are the midpoints of a decade's evenly spaced
// values, and only the first bound, the one between a decade's last value and the next decade's first, and the last
// are off their neighbours' spacing. Those are the regions' edges (8 or 9 regions). Within a region a value x has
// ceil(w) bounds below it, w = |x| * scale + offset being fitted so that w is each inner bound's index at that bound;
// the count is clamped to the region's range (x lies between its edges, which are compared exactly). Only the float
// rounding of the bounds and of w parts this from encode: measured as the tables are built, w is within 1.6e-5 of the
// index at every inner bound and its next float, and w grows with x, so a value whose count ceil(w) could miss has w
// within that of an integer. A lane whose w is within kDoubt of an integer (x on or beside a bound: about one value
// in 2,000 on either map) or NaN is encoded by the search instead.
// The region: |x|'s binade (its exponent; below 2^-31, no map's bound, taken as 2^-31) selects, from 32-entry
// tables, the edge in the binade (each binade holds at most one, checked as the tables are built) and the region
// below it; x above the edge is the next region. The signed map is encoded on |x| over its 128 positive bounds,
// which the negative ones mirror exactly ((-a + -b) / 2 is -((a + b) / 2)): x >= 0 takes 127 + (positive bounds below
// x), x < 0 takes 127 - (positive bounds at or below |x|, the first 127 of them) — a value on a bound takes the lower
// code either way. "At or below" is the next float of |x| compared to the edge, and a lane in doubt at an inner
// bound. Each sign has its region tables (16 entries each), so one fused multiply-add rounded to nearest gives the
// code: 127 +- ceil(w) as round(127 + 0.5 +- w), whose tie is a lane in doubt; the unsigned map's negative entries give
// 0. Bitwise encode's on every float in [-1, 1], both maps (unit.EncodeEveryFloat, in scripts/test.sh --all; every
// bound and its neighbours in the default suite); about twice as fast as the search on the bounds' 16-bit halves it
// replaced (docs/benchmarks.md, "The encode by regions").
constexpr float kDoubt = 1.0f / 4096;
constexpr int kBinades = 32;  // 2^-31 ... 2^0
struct EncodeTables {
  alignas(64) float edge[kBinades];          // the binade's region edge, else 4 (above every scaled value)
  alignas(64) std::int32_t below[kBinades];  // the region of the binade's values up to its edge
  // Per region, x >= 0 at [r], x < 0 at [16 + r]: code = clamp(round(|x| * scale + offset), low, high).
  alignas(64) float scale[32], offset[32];
  alignas(64) std::int32_t low[32], high[32];
  const q8::Map* map;  // encode's, for the lanes in doubt
};
// `bounds`: the bounds encode counts (the unsigned map's 255, the signed map's 128 positive ones), `zero` the code
// of 0 (127 signed, else 0).
EncodeTables makeEncodeTables(const q8::Map& map, const float* bounds, int count, int zero) {
  // The edges: a region's inner bounds keep the spacing of its first two; the first bound off it is the next edge.
  std::vector<int> edges = {0};
  for (int first = 1; first < count;) {
    const double step = first + 1 < count ? double{bounds[first + 1]} - bounds[first] : 0.0;
    int k = first + 1;
    while (k < count && std::fabs(bounds[k] - (bounds[first] + (k - first) * step)) < 1e-3 * step) ++k;
    if (k == count) break;
    edges.push_back(k);
    first = k + 1;
  }
  const int regions = static_cast<int>(edges.size()) + 1;
  RP_CHECK(regions <= 16, "8-bit encode: {} regions, the tables hold 16", regions);
  EncodeTables t{};
  t.map = &map;
  for (int e = 0; e < kBinades; ++e) {
    const float from = std::ldexp(1.0f, e - 31), to = std::ldexp(1.0f, e - 30);
    t.edge[e] = 4.0f;
    for (std::size_t r = 0; r < edges.size(); ++r) {
      const float edge = bounds[edges[r]];
      if (edge < from) t.below[e] = static_cast<std::int32_t>(r) + 1;
      if (edge < from || edge >= to) continue;
      RP_CHECK(t.edge[e] == 4.0f, "8-bit encode: the binade 2^{} holds two region edges", e - 31);
      t.edge[e] = edge;
    }
  }
  RP_CHECK(bounds[0] > std::ldexp(1.0f, -31), "8-bit encode: a bound below 2^-31");
  double worst = 0.0;
  for (int r = 0; r < regions; ++r) {
    const int low = r == 0 ? 0 : edges[r - 1] + 1, high = r + 1 == regions ? count : edges[r];
    const int lowNegative = std::min(high, zero), highNegative = std::min(low, zero);  // at most `zero` below
    t.low[r] = zero + low;
    t.high[r] = zero + high;
    t.low[16 + r] = zero - lowNegative;
    t.high[16 + r] = zero - highNegative;
    t.offset[r] = static_cast<float>(zero + low);  // a region without inner bounds: its one count
    t.offset[16 + r] = static_cast<float>(zero - highNegative);
    if (low == high) continue;
    // Inner bounds low ... high - 1: w(bounds[i]) = i. One inner bound: the mean spacing between its edges.
    const int last = high - 1;
    const double scale = low < last ? (last - low) / (double{bounds[last]} - bounds[low])
                                    : 2.0 / (double{bounds[std::min(high, count - 1)]} - bounds[low - 1]);
    const double offset = low - bounds[low] * scale;
    t.scale[r] = static_cast<float>(scale);
    t.offset[r] = static_cast<float>(zero + 0.5 + offset);
    if (zero > 0) {
      t.scale[16 + r] = -t.scale[r];
      t.offset[16 + r] = static_cast<float>(zero - 0.5 - offset);
    }
    for (int i = low; i <= last; ++i) {
      for (const float x : {bounds[i], std::nextafter(bounds[i], 2.0f)}) {
        worst = std::max(worst, std::fabs(std::fma(x, t.scale[r], t.offset[r]) - (zero + i + 0.5)));
        if (zero > 0)
          worst = std::max(worst, std::fabs(std::fma(x, t.scale[16 + r], t.offset[16 + r]) - (zero - i - 0.5)));
      }
    }
  }
  RP_CHECK(worst < kDoubt / 4, "8-bit encode: the regions' fit is {} of a step off a bound", worst);
  return t;
}
const EncodeTables& unsignedTables() {  // v: all 255 bounds
  static const EncodeTables t = makeEncodeTables(q8::unsignedMap(), q8::unsignedMap().bounds.data(), 255, 0);
  return t;
}
const EncodeTables& signedTables() {  // m: the 128 positive bounds
  static const EncodeTables t = makeEncodeTables(q8::signedMap(), q8::signedMap().bounds.data() + 127, 128, 127);
  return t;
}

__attribute__((target("avx512f,avx512bw"))) inline __m512i load16(const std::uint16_t* at) {
  return _mm512_load_si512(at);
}
// table[c] per lane, c < 256.
__attribute__((target("avx512f,avx512bw"))) inline __m512i lookup(const std::uint16_t* table, __m512i c) {
  const __mmask32 b6 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(64));
  const __m512i first = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(load16(table), c, load16(table + 32)),
                                                _mm512_permutex2var_epi16(load16(table + 64), c, load16(table + 96)));
  const __m512i second =
      _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(load16(table + 128), c, load16(table + 160)),
                              _mm512_permutex2var_epi16(load16(table + 192), c, load16(table + 224)));
  return _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, _mm512_set1_epi16(128)), first, second);
}

// The values of 32 codes (decode's, bitwise): the map's floats kept as their high and low halves, each looked up as
// 16-bit words and the two interleaved into floats. Lookups without gathers: a gather
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
  const __m512i high = lookup(h.high, q), low = lookup(h.low, q);
  // Word 2j of float j its low half, 2j + 1 its high one: low[j] and high[j] (index 32 + j).
  const __m512i firstWords = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                              6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i secondWords = _mm512_add_epi16(firstWords, _mm512_set1_epi16(16));
  first = _mm512_castsi512_ps(_mm512_permutex2var_epi16(low, firstWords, high));
  second = _mm512_castsi512_ps(_mm512_permutex2var_epi16(low, secondWords, high));
}

// The lanes of `doubt` by the search, on the clamped value as quantizeBlock (Note [Encode by regions]); out of line,
// the hot loop's rare path (about one 16-lane group in 120).
__attribute__((target("avx512f,avx512bw"), noinline)) __m512i encodeInDoubt(const EncodeTables& t, const float* x,
                                                                            float reciprocal, __mmask16 doubt,
                                                                            __m512i c) {
  alignas(64) std::int32_t codes[16];
  _mm512_store_si512(codes, c);
  for (unsigned lanes = doubt; lanes != 0; lanes &= lanes - 1) {
    const int lane = __builtin_ctz(lanes);
    codes[lane] = q8::encode(*t.map, std::clamp(x[lane] * reciprocal, -1.0f, 1.0f));
  }
  return _mm512_load_si512(codes);
}

// GCC 12 takes the `_mm512_undefined_*()` inside its own intrinsics for uninitialized reads here (its bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// A whole block's values into codes, as quantizeBlock: scaled by the reciprocal of max(absmax, 1e-38), 16 at a time
// by their regions (Note [Encode by regions]). quantizeBlock's clamp to [-1, 1] is not needed: absmax is the block's
// largest |x|, and x times a rounded reciprocal of it is at most 1 in magnitude (x * (1 / x) never rounds above 1); a
// NaN, or an infinity's 0 * inf, is a lane in doubt.
__attribute__((target("avx512f,avx512bw"))) inline void quantize256(const EncodeTables& t, const float* x, float absmax,
                                                                    std::uint8_t* out) {
  const float reciprocal = 1.0f / std::max(absmax, 1e-38f);
  const __m512 r = _mm512_set1_ps(reciprocal);
  const __m512i signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u)), absMask = _mm512_set1_epi32(0x7FFFFFFF),
                one = _mm512_set1_epi32(1), negative16 = _mm512_set1_epi32(16);
  const __m512 smallest = _mm512_set1_ps(std::ldexp(1.0f, -31)), sure = _mm512_set1_ps(0.5f - kDoubt);
  const __m512 edge0 = _mm512_load_ps(t.edge), edge1 = _mm512_load_ps(t.edge + 16);
  const __m512i below0 = _mm512_load_si512(t.below), below1 = _mm512_load_si512(t.below + 16);
  const __m512 scale0 = _mm512_load_ps(t.scale), scale1 = _mm512_load_ps(t.scale + 16);
  const __m512 offset0 = _mm512_load_ps(t.offset), offset1 = _mm512_load_ps(t.offset + 16);
  const __m512i low0 = _mm512_load_si512(t.low), low1 = _mm512_load_si512(t.low + 16);
  const __m512i high0 = _mm512_load_si512(t.high), high1 = _mm512_load_si512(t.high + 16);
  for (std::size_t k = 0; k < q8::kBlock; k += 16) {
    const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + k), r);
    const __mmask16 negative = _mm512_test_epi32_mask(_mm512_castps_si512(y), signBit);
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(y), absMask);
    const __m512 a = _mm512_castsi512_ps(magnitude);
    const __m512i binade = _mm512_srli_epi32(_mm512_castps_si512(_mm512_max_ps(a, smallest)), 23);  // low 5 bits
    // x < 0 counts the bounds at or below |x|: its next float against the edge.
    const __m512 compared = _mm512_castsi512_ps(_mm512_mask_add_epi32(magnitude, negative, magnitude, one));
    __m512i region = _mm512_permutex2var_epi32(below0, binade, below1);
    region = _mm512_mask_add_epi32(
        region, _mm512_cmp_ps_mask(compared, _mm512_permutex2var_ps(edge0, binade, edge1), _CMP_GT_OQ), region, one);
    region = _mm512_mask_add_epi32(region, negative, region, negative16);
    const __m512 w = _mm512_fmadd_ps(a, _mm512_permutex2var_ps(scale0, region, scale1),
                                     _mm512_permutex2var_ps(offset0, region, offset1));
    __m512i c = _mm512_cvt_roundps_epi32(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    c = _mm512_min_epi32(_mm512_max_epi32(c, _mm512_permutex2var_epi32(low0, region, low1)),
                         _mm512_permutex2var_epi32(high0, region, high1));
    const __m512 fraction = _mm512_sub_ps(w, _mm512_roundscale_ps(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __mmask16 doubt = _mm512_cmp_ps_mask(
        _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(fraction), absMask)), sure, _CMP_NLT_UQ);
    if (doubt != 0) c = encodeInDoubt(t, x + k, reciprocal, doubt, c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm512_cvtepi32_epi8(c));
  }
}
#pragma GCC diagnostic pop

}  // namespace

__attribute__((target("avx512f,avx512bw"))) void quantizeBlockAvx512(bool isSigned, const float* x, float absmax,
                                                                     std::uint8_t* out) {
  quantize256(isSigned ? signedTables() : unsignedTables(), x, absmax, out);
}

__attribute__((target("avx512f,avx512bw,avx2,f16c,fma"))) void adamw8Avx512(const AdamWStepScalars& s,
                                                                            const AdamW8Slice& x) {
  const Halves &mCode = signedHalves(), &vCode = unsignedHalves();
  const EncodeTables &mTables = signedTables(), &vTables = unsignedTables();
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
    quantize256(mTables, m, absM, x.m + b * q8::kBlock);
    quantize256(vTables, v, absV, x.v + b * q8::kBlock);
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
