#include "optim/blockwise8.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace rp::optim::q8 {
namespace {

// Note [8-bit states]
// bitsandbytes' 8-bit optimizers keep each moment as one byte per element: a code into a 256-value dynamic map
// (create_dynamic_map: for exponents 10^-6 ... 10^0, the midpoints of torch.linspace(0.1, 1, k) scaled by the
// exponent, k doubling with it; signed for m, with 0 and 1; unsigned for v, twice the fractions), and per block
// of 256 elements the float32 absmax the codes are relative to. A value x of a block with absmax a is stored as
// the code whose map value is nearest x / a, a value halfway between two codes taking the lower, and read back
// as code[q] * a. The map is bitsandbytes' bit for bit: linspace's float32 values are start + step * k with one
// rounding below the halfway index and end - step * (k' ) above it, as torch computes them.
// The rounding is bitsandbytes' own definition, its generic kernel (backends/default: torch.bucketize against
// the float32 midpoints, the same as its CUDA kernels): x scaled by 1 / max(a, 1e-38) for a whole block, divided
// by it for a tensor's short last block, clamped to [-1, 1]. Its native CPU kernel (0.50.2) searches a grid and
// misses the nearest code on part of the inputs (zero as the unsigned map's code 7, 1.6e-5, among others);
// tests/golden/test_golden_optim8.cpp counts how often against the generic one, which ours equals.
Map makeMap(bool isSigned) {
  std::vector<float> values;
  for (int e = 0; e < 7; ++e) {
    const int items = isSigned ? (1 << e) + 1 : (1 << (e + 1)) + 1;
    const float start = 0.1f, end = 1.0f, step = (end - start) / static_cast<float>(items - 1);
    std::vector<float> bounds(static_cast<std::size_t>(items));
    for (int k = 0; k < items; ++k) {
      bounds[static_cast<std::size_t>(k)] = k < items / 2 ? std::fma(step, static_cast<float>(k), start)
                                                          : std::fma(-step, static_cast<float>(items - 1 - k), end);
    }
    const auto scale = static_cast<float>(std::pow(10.0, -6 + e));
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      const float mean = (bounds[k] + bounds[k + 1]) / 2.0f;
      values.push_back(scale * mean);
      if (isSigned) values.push_back(-(scale * mean));
    }
  }
  values.push_back(0.0f);
  values.push_back(1.0f);
  std::sort(values.begin(), values.end());
  Map map{};
  std::copy(values.begin(), values.end(), map.code.begin());
  for (std::size_t i = 0; i + 1 < map.code.size(); ++i) map.bounds[i] = (map.code[i] + map.code[i + 1]) / 2.0f;
  return map;
}

}  // namespace

const Map& signedMap() {
  static const Map map = makeMap(true);
  return map;
}

const Map& unsignedMap() {
  static const Map map = makeMap(false);
  return map;
}

float quantizeBlock(const Map& map, const float* x, std::size_t n, std::uint8_t* out) {
  float absmax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const float a = std::max(absmax, 1e-38f);
  if (n == kBlock) {
    const float r = 1.0f / a;
    for (std::size_t i = 0; i < n; ++i) out[i] = encode(map, std::clamp(x[i] * r, -1.0f, 1.0f));
    return absmax;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = encode(map, std::clamp(x[i] / a, -1.0f, 1.0f));
  return a;  // bitsandbytes keeps a short block's clamped absmax
}

void quantize(const Map& map, const float* x, std::size_t n, std::uint8_t* codes, float* absmax) {
  for (std::size_t b = 0; b * kBlock < n; ++b) {
    const std::size_t at = b * kBlock;
    absmax[b] = quantizeBlock(map, x + at, std::min(kBlock, n - at), codes + at);
  }
}

void dequantize(const Map& map, const std::uint8_t* codes, const float* absmax, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = decode(map, codes[i], absmax[i / kBlock]);
}

}  // namespace rp::optim::q8
