// SIMD AdamW kernels (docs/optimizer.md, "Kernels"): AVX-512 and AVX2 versions of adamwScalar, chosen at
// run time from what the CPU supports. They perform the scalar kernel's float32 operations in the same
// order with no fused multiply-add (this file is built with -ffp-contract=off), so their results are
// bitwise equal to it (tested), including the bf16/fp16 model copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "optim/adamw.h"

namespace rp::optim {

void adamwAvx2(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& slice);
void adamwAvx512(const AdamWStepScalars& s, bool amsgrad, const AdamWSlice& slice);
// The 8-bit kernel (Note [8-bit states]), AVX-512 only: elsewhere adamw8Scalar runs.
void adamw8Avx512(const AdamWStepScalars& s, const AdamW8Slice& slice);
// That kernel's encode of one whole block (q8::kBlock values) with its absmax, m's map where `isSigned` (Note [Encode
// by regions]): q8::quantizeBlock's codes, for tests.
void quantizeBlockAvx512(bool isSigned, const float* x, float absmax, std::uint8_t* out);

// The float32 -> bfloat16 / half copy of `n` values (`copy` != kNone), as toBFloat16 / toHalf round, bitwise: the
// AVX2 kernels' narrowing where the CPU runs them, else the scalar loop. The async master -> weights copy's pass
// (engine/optimizer_worker.cpp; docs/benchmarks.md, "The emulated GPU host").
void narrowFloats(std::uint16_t* dst, const float* src, std::size_t n, ModelCopy copy);

// Whether this CPU runs the kernel (AVX2 + F16C; AVX-512F + BW + F16C).
bool cpuRunsAvx2();
bool cpuRunsAvx512();

// The fastest kernel this CPU runs (AVX-512F+BW, else AVX2+F16C, else scalar); RP_ADAMW_KERNEL=scalar|avx2|avx512
// forces one (an unsupported choice is an InputError).
AdamWKernel bestAdamWKernel();
const char* adamwKernelName(AdamWKernel kernel);
// The 8-bit kernel for bestAdamWKernel's choice: AVX-512's where that is it, else the scalar one.
AdamW8Kernel bestAdamW8Kernel();

}  // namespace rp::optim
