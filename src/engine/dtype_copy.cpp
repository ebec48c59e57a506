// The copies between the store's model dtype and the optimizer's float32 buffers (engine/dtype_copy.h).
#include "engine/dtype_copy.h"

#include <cstring>

#include "optim/adamw.h"
#include "optim/adamw_simd.h"

namespace rp::engine {
namespace {

// `n` two-byte values at `src` widened by `from` into `dst` (or added to it).
template <typename From>
void widenHalves(float* dst, const std::uint8_t* src, std::size_t n, bool add, From from) {
  for (std::size_t k = 0; k < n; ++k) {
    std::uint16_t bits;
    std::memcpy(&bits, src + k * 2, 2);
    const float x = from(bits);
    dst[k] = add ? dst[k] + x : x;
  }
}

}  // namespace

void widen(float* dst, const std::uint8_t* src, std::size_t n, c10::ScalarType dtype, bool add) {
  if (dtype == c10::ScalarType::Float) {
    if (!add) {
      std::memcpy(dst, src, n * sizeof(float));
      return;
    }
    for (std::size_t k = 0; k < n; ++k) {
      float x;
      std::memcpy(&x, src + k * 4, 4);
      dst[k] += x;
    }
  } else if (dtype == c10::ScalarType::BFloat16) {
    widenHalves(dst, src, n, add, [](std::uint16_t bits) { return optim::fromBFloat16(bits); });
  } else {
    widenHalves(dst, src, n, add, [](std::uint16_t bits) { return optim::fromHalf(bits); });
  }
}

void narrowInto(std::uint8_t* dst, const float* src, std::size_t n, c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Float) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  // The AVX2 kernels' rounding where the CPU has it (bitwise the scalar's): this pass was the async copy's
  // whole cost (docs/benchmarks.md, "The emulated GPU host"). The slots are 64-byte aligned, so dst is 2-aligned.
  optim::narrowFloats(reinterpret_cast<std::uint16_t*>(dst), src, n,
                      dtype == c10::ScalarType::Half ? optim::ModelCopy::kFloat16 : optim::ModelCopy::kBFloat16);
}

}  // namespace rp::engine
