#include "model/torch_bridge.h"

#include <cstring>

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::model {

torch::Tensor toTorch(const safetensors::TensorView& view) {
  torch::ScalarType type = torch::kFloat;
  switch (view.dtype) {
    case safetensors::DType::kF64:
      type = torch::kDouble;
      break;
    case safetensors::DType::kF32:
      type = torch::kFloat;
      break;
    case safetensors::DType::kBF16:
      type = torch::kBFloat16;
      break;
    case safetensors::DType::kF16:
      type = torch::kHalf;
      break;
    case safetensors::DType::kI64:
      type = torch::kInt64;
      break;
    case safetensors::DType::kI32:
      type = torch::kInt32;
      break;
    case safetensors::DType::kU8:
      type = torch::kUInt8;
      break;
    default:
      RP_THROW(InputError, "{}: tensor '{}' has dtype {}; expected F64, F32, BF16, F16, I64, I32 or U8", *view.file,
               view.name, safetensors::dtypeName(view.dtype));
  }
  auto tensor = torch::empty(view.shape, torch::TensorOptions().dtype(type));
  std::memcpy(tensor.data_ptr(), view.data, view.nbytes);
  return tensor;
}

}  // namespace rp::model
