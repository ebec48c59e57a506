// AdamW with 8-bit blockwise moments (Note [8-bit states], optim/blockwise8.cpp): the scalar kernel, the
// readable specification the SIMD ones (adamw8_simd.cpp) equal bit for bit.
#include <algorithm>
#include <cmath>

#include "optim/adamw.h"
#include "optim/blockwise8.h"

namespace rp::optim {

// Note [8-bit split master]
// A split master (Note [Split master]) keeps its tie bit in the sign of its float32 v, which 8-bit moments do
// not have. So where an 8-bit parameter's updated master is a tie rounded up (low half 0x8000, the bfloat16 weight
// one above the high half), its low word is stored as 0x8001 instead: the master moves one float32 ulp (2^-24
// relative) towards its weight, which the weight does not see, and the join is then unambiguous. About one
// element in 131,072 a step; measured against the float32-master layout in tests/unit/test_adamw8.cpp.
inline void writeSplitMaster8(float p, std::uint16_t& weight, std::uint16_t& low) {
  if (splitMaster(p, weight, low)) low = 0x8001;
}

// bitsandbytes' update, "adam" in optimizer_update_8bit_blockwise (its CPU function, in float32 as torch computes
// it: add_ with alpha and addcmul_ fused multiply-adds, addcdiv_ as (value * m) / denom), block by block:
//   g = g * gnorm_scale
//   m = m * beta1 + (1 - beta1) * g
//   v = v * beta2 + (1 - beta2) * g * g
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p * (1 - lr * wd)
//   p = p + ((-lr / (1 - beta1^t)) * m) / denom
// with m and v read from their codes and absmax and written back quantized with the block's new absmax.
void adamw8Scalar(const AdamWStepScalars& s, const AdamW8Slice& x) {
  const q8::Map& mMap = q8::signedMap();
  const q8::Map& vMap = q8::unsignedMap();
  const bool split = x.masterLow != nullptr;
  float m[q8::kBlock], v[q8::kBlock];
  for (std::size_t b = 0; b * q8::kBlock < x.n; ++b) {
    const std::size_t at = b * q8::kBlock, len = std::min(q8::kBlock, x.n - at);
    for (std::size_t k = 0; k < len; ++k) {
      const std::size_t i = at + k;
      const float g = x.grad.at(i) * s.gradScale;
      m[k] = std::fma(s.oneMinusBeta1, g, q8::decode(mMap, x.m[i], x.absmaxM[b]) * s.beta1);
      v[k] = std::fma(s.oneMinusBeta2 * g, g, q8::decode(vMap, x.v[i], x.absmaxV[b]) * s.beta2);
      const float denom = std::sqrt(v[k]) / s.biasCorrection2Sqrt + s.eps;
      float p = split ? joinMaster(x.modelCopy[i], x.masterLow[i], false) : x.param[i];
      p = p * s.decay;
      p = p + ((-s.stepSize) * m[k]) / denom;
      if (split) {
        writeSplitMaster8(p, x.modelCopy[i], x.masterLow[i]);
        continue;
      }
      x.param[i] = p;
      if (x.copy == ModelCopy::kBFloat16) x.modelCopy[i] = toBFloat16(p);
      if (x.copy == ModelCopy::kFloat16) x.modelCopy[i] = toHalf(p);
    }
    x.absmaxM[b] = q8::quantizeBlock(mMap, m, len, x.m + at);
    x.absmaxV[b] = q8::quantizeBlock(vMap, v, len, x.v + at);
  }
}

}  // namespace rp::optim
