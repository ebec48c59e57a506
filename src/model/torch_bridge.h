// safetensors views -> LibTorch tensors.
#pragma once

#include <torch/types.h>

#include "model/safetensors.h"

namespace rp::model {

// A new tensor holding a copy of `view` (F64, F32, BF16, F16, I64, I32, U8). The copy goes through an aligned
// buffer: safetensors offsets need not be aligned to the element size. Other dtypes are InputErrors
// naming the file and tensor.
torch::Tensor toTorch(const safetensors::TensorView& view);

}  // namespace rp::model
