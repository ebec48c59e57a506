// The copies between the store's model dtype and the optimizer's float32 buffers (engine/dtype_copy.cpp):
// exact widening, and narrowing with LibTorch's round to nearest even (optim/adamw.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/core/ScalarType.h>

namespace rp::engine {

// `n` elements of the model dtype at `src` widened into `dst` (or added to it), one loop per dtype (the bfloat16
// one inlined: the largest pass of a bf16 step).
void widen(float* dst, const std::uint8_t* src, std::size_t n, c10::ScalarType dtype, bool add);
// `n` floats rounded to the model dtype into `dst`.
void narrowInto(std::uint8_t* dst, const float* src, std::size_t n, c10::ScalarType dtype);

}  // namespace rp::engine
