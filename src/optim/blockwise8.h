// 8-bit blockwise states (docs/optimizer.md, "8-bit states"): bitsandbytes' dynamic quantization of AdamW's
// moments — its dynamic map (signed for m, unsigned for v), blocks of 256 elements, a float32 absmax per block —
// with its rounding, computed here without torch (Note [8-bit states]).
// Thread-safety: the maps are built once (thread-safe statics) and read-only after; the functions are reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace rp::optim::q8 {

inline constexpr std::size_t kBlock = 256;

// A quantization map: 256 ascending values in [-1, 1], and the decision bounds between neighbours.
struct Map {
  std::array<float, 256> code;
  std::array<float, 255> bounds;  // bounds[i] = (code[i] + code[i + 1]) / 2 in float32
};

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8), value for value.
const Map& signedMap();    // m
const Map& unsignedMap();  // v

// The code of a value already scaled into [-1, 1]: the number of bounds below it, so a value on a bound takes
// the lower code (bitsandbytes' torch.bucketize); NaN gives 0.
inline std::uint8_t encode(const Map& map, float scaled) {
  unsigned i = 0;
  for (unsigned step = 128; step > 0; step >>= 1) {
    if (map.bounds[i + step - 1] < scaled) i += step;
  }
  return static_cast<std::uint8_t>(i);
}

// Quantizes the block x[0, n) (n <= kBlock) into codes `out`, returning its absmax. A whole block (n = kBlock) is
// scaled by the reciprocal of its absmax, a short one (a tensor's last) divided by it, as bitsandbytes does.
float quantizeBlock(const Map& map, const float* x, std::size_t n, std::uint8_t* out);
inline float decode(const Map& map, std::uint8_t q, float absmax) {
  return map.code[q] * absmax;
}

// Whole tensors of `n` elements, block by block: codes and one absmax per block (ceil(n / kBlock) of them).
void quantize(const Map& map, const float* x, std::size_t n, std::uint8_t* codes, float* absmax);
void dequantize(const Map& map, const std::uint8_t* codes, const float* absmax, std::size_t n, float* out);

inline std::size_t blocksOf(std::size_t n) {
  return (n + kBlock - 1) / kBlock;
}

}  // namespace rp::optim::q8
