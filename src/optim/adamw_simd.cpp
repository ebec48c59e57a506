#include "optim/adamw_simd.h"
#include "optim/simd_bf16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <string>

#include "common/env.h"
#include "common/error.h"

namespace rp::optim {
namespace {

// The element range [from, n) of a slice, for the scalar tail.
AdamWSlice tail(const AdamWSlice& x, std::size_t from) {
  return AdamWSlice{x.param != nullptr ? x.param + from : nullptr,
                    x.grad.from(from),
                    x.expAvg + from,
                    x.expAvgSq + from,
                    x.maxExpAvgSq != nullptr ? x.maxExpAvgSq + from : nullptr,
                    x.n - from,
                    x.modelCopy != nullptr ? x.modelCopy + from : nullptr,
                    x.copy,
                    x.masterLow != nullptr ? x.masterLow + from : nullptr};
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx2,f16c"))) void adamwAvx512(const AdamWStepScalars& s, bool amsgrad,
                                                                       const AdamWSlice& x) {
  const __m512 decay = _mm512_set1_ps(s.decay), w = _mm512_set1_ps(s.oneMinusBeta1),
               w2 = _mm512_set1_ps(1.0f - s.oneMinusBeta1), beta2 = _mm512_set1_ps(s.beta2),
               omb2 = _mm512_set1_ps(s.oneMinusBeta2), step = _mm512_set1_ps(-s.stepSize),
               bc2 = _mm512_set1_ps(s.biasCorrection2Sqrt), eps = _mm512_set1_ps(s.eps),
               gradScale = _mm512_set1_ps(s.gradScale);
  const GradIn grad = x.grad;  // a local: the stores below cannot alias it
  const bool lerpFromM = s.oneMinusBeta1 < 0.5f, split = x.masterLow != nullptr;
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x8000), lowMask = _mm512_set1_epi32(0xFFFF),
                signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  std::size_t i = 0;
  for (; i + 16 <= x.n; i += 16) {
    const __m512 g = _mm512_mul_ps(gradAvx512(grad, i), gradScale);
    __m512i storedV = _mm512_loadu_si512(x.expAvgSq + i);
    __m512 p;
    if (split) {  // Note [Split master]: h = w - 1 where l > 0x8000, or l = 0x8000 with the tie bit
      const __m512i weight =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.modelCopy + i)));
      const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.masterLow + i)));
      const __mmask16 up = _mm512_cmpgt_epu32_mask(low, half) |
                           (_mm512_cmpeq_epi32_mask(low, half) & _mm512_test_epi32_mask(storedV, signBit));
      const __m512i high = _mm512_mask_sub_epi32(weight, up, weight, one);
      p = _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(high, 16), low));
      storedV = _mm512_andnot_si512(signBit, storedV);
    } else {
      p = _mm512_loadu_ps(x.param + i);
    }
    p = _mm512_mul_ps(p, decay);
    __m512 m = _mm512_loadu_ps(x.expAvg + i);
    const __m512 diff = _mm512_sub_ps(g, m);
    m = lerpFromM ? _mm512_add_ps(m, _mm512_mul_ps(w, diff)) : _mm512_sub_ps(g, _mm512_mul_ps(diff, w2));
    __m512 v =
        _mm512_add_ps(_mm512_mul_ps(_mm512_castsi512_ps(storedV), beta2), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    __m512 second = v;
    if (amsgrad) {
      second = _mm512_max_ps(v, _mm512_loadu_ps(x.maxExpAvgSq + i));  // std::max(vmax, v), NaNs included
      _mm512_storeu_ps(x.maxExpAvgSq + i, second);
    }
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(second), bc2), eps);
    p = _mm512_add_ps(p, _mm512_mul_ps(step, _mm512_div_ps(m, denom)));
    if (!split) _mm512_storeu_ps(x.param + i, p);
    _mm512_storeu_ps(x.expAvg + i, m);
    if (x.copy == ModelCopy::kBFloat16) {
      const __m512i bits = _mm512_castps_si512(p);
      const __m512i r = bfloat16BitsAvx512(p);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.modelCopy + i), _mm512_cvtepi32_epi16(r));
      if (split) {  // the low half, and the tie bit where a tie was rounded up (r != h)
        const __m512i low = _mm512_and_si512(bits, lowMask);
        const __mmask16 tie =
            _mm512_cmpeq_epi32_mask(low, half) & _mm512_cmpneq_epi32_mask(r, _mm512_srli_epi32(bits, 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.masterLow + i), _mm512_cvtepi32_epi16(low));
        v = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_andnot_si512(signBit, _mm512_castps_si512(v)), tie,
                                                     _mm512_andnot_si512(signBit, _mm512_castps_si512(v)), signBit));
      }
    } else if (x.copy == ModelCopy::kFloat16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.modelCopy + i),
                          _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    _mm512_storeu_ps(x.expAvgSq + i, v);
  }
  if (i < x.n) adamwScalar(s, amsgrad, tail(x, i));
}

// 8 floats to bfloat16 as toBFloat16 rounds them (to nearest even; NaN -> 0x7FC0), narrowed to 8 x u16: the
// AVX2 kernel's model copy and the async copy's pass (narrowFloats).
__attribute__((target("avx2,f16c"))) inline __m256i bfloat16BitsAvx2(__m256 p) {
  const __m256i bits = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q)));
}
// 8 x u32 (each <= 0xFFFF) narrowed to 8 x u16: pack within lanes, then gather the two lanes' halves.
__attribute__((target("avx2,f16c"))) inline __m128i narrow16Avx2(__m256i r) {
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}
__attribute__((target("avx2,f16c"))) inline __m128i bfloat16Avx2(__m256 p) {
  return narrow16Avx2(bfloat16BitsAvx2(p));
}

__attribute__((target("avx2,f16c"))) void adamwAvx2(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& x) {
  const __m256 decay = _mm256_set1_ps(s.decay), w = _mm256_set1_ps(s.oneMinusBeta1),
               w2 = _mm256_set1_ps(1.0f - s.oneMinusBeta1), beta2 = _mm256_set1_ps(s.beta2),
               omb2 = _mm256_set1_ps(s.oneMinusBeta2), step = _mm256_set1_ps(-s.stepSize),
               bc2 = _mm256_set1_ps(s.biasCorrection2Sqrt), eps = _mm256_set1_ps(s.eps),
               gradScale = _mm256_set1_ps(s.gradScale);
  const GradIn grad = x.grad;  // a local: the stores below cannot alias it
  const bool lerpFromM = s.oneMinusBeta1 < 0.5f, split = x.masterLow != nullptr;
  const __m256i half = _mm256_set1_epi32(0x8000), lowMask = _mm256_set1_epi32(0xFFFF),
                signBit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  std::size_t i = 0;
  for (; i + 8 <= x.n; i += 8) {
    const __m256 g = _mm256_mul_ps(gradAvx2(grad, i), gradScale);
    __m256i storedV = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.expAvgSq + i));
    __m256 p;
    if (split) {  // Note [Split master]: h = w - 1 where l > 0x8000, or l = 0x8000 with the tie bit
      const __m256i weight = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.modelCopy + i)));
      const __m256i low = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.masterLow + i)));
      const __m256i up =
          _mm256_or_si256(_mm256_cmpgt_epi32(low, half),  // -1 where h = w - 1
                          _mm256_and_si256(_mm256_cmpeq_epi32(low, half), _mm256_srai_epi32(storedV, 31)));
      p = _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(weight, up), 16), low));
      storedV = _mm256_andnot_si256(signBit, storedV);
    } else {
      p = _mm256_loadu_ps(x.param + i);
    }
    p = _mm256_mul_ps(p, decay);
    __m256 m = _mm256_loadu_ps(x.expAvg + i);
    const __m256 diff = _mm256_sub_ps(g, m);
    m = lerpFromM ? _mm256_add_ps(m, _mm256_mul_ps(w, diff)) : _mm256_sub_ps(g, _mm256_mul_ps(diff, w2));
    __m256 v =
        _mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(storedV), beta2), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    __m256 second = v;
    if (amsgrad) {
      second = _mm256_max_ps(v, _mm256_loadu_ps(x.maxExpAvgSq + i));
      _mm256_storeu_ps(x.maxExpAvgSq + i, second);
    }
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(second), bc2), eps);
    p = _mm256_add_ps(p, _mm256_mul_ps(step, _mm256_div_ps(m, denom)));
    if (!split) _mm256_storeu_ps(x.param + i, p);
    _mm256_storeu_ps(x.expAvg + i, m);
    if (x.copy == ModelCopy::kBFloat16) {
      const __m256i r = bfloat16BitsAvx2(p);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(x.modelCopy + i), narrow16Avx2(r));
      if (split) {  // the low half, and the tie bit where a tie was rounded up (r != h)
        const __m256i bits = _mm256_castps_si256(p), low = _mm256_and_si256(bits, lowMask);
        const __m256i tie =
            _mm256_andnot_si256(_mm256_cmpeq_epi32(r, _mm256_srli_epi32(bits, 16)), _mm256_cmpeq_epi32(low, half));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(x.masterLow + i), narrow16Avx2(low));
        v = _mm256_castsi256_ps(
            _mm256_or_si256(_mm256_andnot_si256(signBit, _mm256_castps_si256(v)), _mm256_and_si256(tie, signBit)));
      }
    } else if (x.copy == ModelCopy::kFloat16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(x.modelCopy + i),
                       _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    _mm256_storeu_ps(x.expAvgSq + i, v);
  }
  if (i < x.n) adamwScalar(s, amsgrad, tail(x, i));
}

namespace {

// The AVX2 kernel's bfloat16 rounding (and F16C's half), 8 values at a time; the rest as the scalar loop does.
__attribute__((target("avx2,f16c"))) void narrowAvx2(std::uint16_t* dst, const float* src, std::size_t n,
                                                     ModelCopy copy) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_loadu_ps(src + i);
    if (copy == ModelCopy::kBFloat16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bfloat16Avx2(p));
    } else if (_mm256_movemask_ps(_mm256_cmp_ps(p, p, _CMP_UNORD_Q)) != 0) {
      for (std::size_t k = i; k < i + 8; ++k) dst[k] = toHalf(src[k]);  // F16C keeps a NaN's payload; toHalf does not
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  for (; i < n; ++i) dst[i] = copy == ModelCopy::kBFloat16 ? toBFloat16(src[i]) : toHalf(src[i]);
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool hasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace

void narrowFloats(std::uint16_t* dst, const float* src, std::size_t n, ModelCopy copy) {
  RP_CHECK(copy != ModelCopy::kNone, "narrowFloats needs a 16-bit dtype");
  static const bool avx2 = cpuRunsAvx2() && env::get(env::kAdamWKernel) != "scalar";
  if (avx2) return narrowAvx2(dst, src, n, copy);
  for (std::size_t i = 0; i < n; ++i) dst[i] = copy == ModelCopy::kBFloat16 ? toBFloat16(src[i]) : toHalf(src[i]);
}

bool cpuRunsAvx2() {
  return __builtin_cpu_supports("avx2") && hasF16c();
}
bool cpuRunsAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && hasF16c();
}

AdamWKernel bestAdamWKernel() {
  const std::string forced = env::get(env::kAdamWKernel);
  const bool avx512 = cpuRunsAvx512(), avx2 = cpuRunsAvx2();
  if (forced == "scalar") return &adamwScalar;
  if (forced == "avx2" || (forced.empty() && !avx512 && avx2)) {
    if (!avx2) RP_THROW(InputError, "{}=avx2: this CPU lacks AVX2 or F16C", env::kAdamWKernel.name);
    return &adamwAvx2;
  }
  if (forced == "avx512" || (forced.empty() && avx512)) {
    if (!avx512) RP_THROW(InputError, "{}=avx512: this CPU lacks AVX-512F/BW or F16C", env::kAdamWKernel.name);
    return &adamwAvx512;
  }
  if (!forced.empty()) {
    RP_THROW(InputError, "{}='{}': expected scalar, avx2 or avx512", env::kAdamWKernel.name, forced);
  }
  return &adamwScalar;
}

AdamW8Kernel bestAdamW8Kernel() {
  return bestAdamWKernel() == &adamwAvx512 ? &adamw8Avx512 : &adamw8Scalar;
}

const char* adamwKernelName(AdamWKernel kernel) {
  if (kernel == &adamwAvx512) return "avx512";
  if (kernel == &adamwAvx2) return "avx2";
  return "scalar";
}

}  // namespace rp::optim
