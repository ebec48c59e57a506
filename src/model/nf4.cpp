#include "model/nf4.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/causal_lm.h"
#include "model/torch_bridge.h"

namespace rp::model {
namespace {

// The NF4 code values (QLoRA's Appendix E, as bitsandbytes stores them in `quant_map`).
constexpr float kNf4[16] = {-1.0F,
                            -0.6961928009986877F,
                            -0.5250730514526367F,
                            -0.39491748809814453F,
                            -0.28444138169288635F,
                            -0.18477343022823334F,
                            -0.09105003625154495F,
                            0.0F,
                            0.07958029955625534F,
                            0.16093020141124725F,
                            0.24611230194568634F,
                            0.33791524171829224F,
                            0.44070982933044434F,
                            0.5626170039176941F,
                            0.7229568362236023F,
                            1.0F};
constexpr std::int64_t kNestedBlockSize = 256;

torch::Tensor nf4Code() {
  return torch::from_blob(const_cast<float*>(kNf4), {16}, torch::kFloat).clone();
}

// Blockwise 8-bit quantisation over `map` (256 sorted values), after bitsandbytes' CPU quantize_blockwise: per
// block the absmax, then each value / absmax to the nearest map entry (the left on a tie), with map[0] taken
// as -1 (the map's first entry is -0.993, which the CPU kernel overwrites first). bitsandbytes finds the left
// neighbour with an approximate bucket search that near zero and at ties sometimes stores a neighbouring code
// (docs/model.md, "NF4 bases"); this stores the nearest.
void quantizeBlockwise8(const torch::Tensor& values, const torch::Tensor& map, torch::Tensor& codes,
                        torch::Tensor& absmax) {
  const auto n = values.numel();
  const auto blocks = (n + kNestedBlockSize - 1) / kNestedBlockSize;
  codes = torch::empty({n}, torch::kUInt8);
  absmax = torch::empty({blocks}, torch::kFloat);
  std::vector<float> code(map.data_ptr<float>(), map.data_ptr<float>() + 256);
  code[0] = -1.0F;
  const float* a = values.data_ptr<float>();
  auto* out = codes.data_ptr<std::uint8_t>();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kNestedBlockSize, end = std::min(n, begin + kNestedBlockSize);
    float m = -3.402823466e38F;
    for (std::int64_t i = begin; i < end; ++i) m = std::fmax(m, std::fabs(a[i]));
    absmax.data_ptr<float>()[b] = m;
    for (std::int64_t i = begin; i < end; ++i) {
      const float x = a[i] / m;
      auto idx = static_cast<std::int64_t>(std::upper_bound(code.begin(), code.end(), x) - code.begin()) - 1;
      idx = std::clamp<std::int64_t>(idx, 0, 255);
      if (idx < 255 &&
          std::fabs(x - code[static_cast<std::size_t>(idx + 1)]) < std::fabs(x - code[static_cast<std::size_t>(idx)])) {
        ++idx;
      }
      out[i] = static_cast<std::uint8_t>(idx);
    }
  }
}

std::string describeShape(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

torch::Tensor dynamicMap() {
  // bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), with the same LibTorch ops.
  constexpr int kExponentBits = 7, kNonSignBits = 7;
  std::vector<double> data;
  auto add = [&](std::int64_t items, double scale) {
    const auto bounds = torch::linspace(0.1, 1, items, torch::kFloat);
    const auto means = (bounds.slice(0, 0, items - 1) + bounds.slice(0, 1)) / 2.0;
    for (double sign : {1.0, -1.0}) {
      const auto scaled = means * (sign * scale);
      for (std::int64_t i = 0; i < scaled.numel(); ++i) data.push_back(scaled.data_ptr<float>()[i]);
    }
  };
  for (int i = 0; i < kExponentBits; ++i) {
    add((std::int64_t{1} << (i + kNonSignBits - kExponentBits)) + 1, std::pow(10.0, -(kExponentBits - 1) + i));
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  RP_CHECK(data.size() == 256, "dynamic map of {} values", data.size());
  return torch::tensor(data, torch::kDouble).to(torch::kFloat);
}

Nf4Tensor quantizeNf4(const torch::Tensor& weight, bool doubleQuant) {
  // As bitsandbytes' quantize_4bit (default backend): x * (1 / absmax) clamped to [-1, 1] (the last, partial
  // block divides), bucketized at the midpoints of the code values.
  Nf4Tensor q;
  q.shape = weight.sizes().vec();
  const auto flat = weight.detach().to(torch::kCPU, torch::kFloat).contiguous().reshape(-1);
  const auto n = flat.numel(), rem = n % kNf4BlockSize, full = n - rem;
  const auto whole = flat.slice(0, 0, full).view({full / kNf4BlockSize, kNf4BlockSize});
  auto absmax = std::get<0>(whole.abs().max(-1));
  auto scaled = torch::clamp(whole * (1.0 / absmax.clamp_min(1e-38)).view({-1, 1}), -1, 1).reshape(-1);
  if (rem > 0) {
    const auto tail = flat.slice(0, full);
    const auto am = tail.abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, am.unsqueeze(0)});
    scaled = torch::cat({scaled, torch::clamp(tail / am, -1, 1)});
  }
  if (scaled.numel() % 2 != 0) scaled = torch::constant_pad_nd(scaled, {0, 1});
  const auto code = nf4Code();
  const auto bounds = (code.slice(0, 0, 15) + code.slice(0, 1)) / 2;
  const auto idx = torch::bucketize(scaled, bounds, /*out_int32=*/true).to(torch::kUInt8);
  q.codes = torch::bitwise_or(idx.slice(0, 0, idx.numel(), 2).bitwise_left_shift(4), idx.slice(0, 1, idx.numel(), 2));
  if (!doubleQuant) {
    q.absmax = absmax;
    return q;
  }
  q.nested = true;
  q.offset = absmax.mean().item<float>();
  q.nestedMap = dynamicMap();
  quantizeBlockwise8((absmax - q.offset).contiguous(), q.nestedMap, q.absmaxCodes, q.nestedAbsmax);
  return q;
}

torch::Tensor dequantizeNf4(const Nf4Tensor& q) {
  std::int64_t n = 1;
  for (auto d : q.shape) n *= d;
  torch::Tensor absmax = q.absmax;
  if (q.nested) {
    // As bitsandbytes' dequantize_blockwise, then + offset, in float32.
    const auto blocks = q.absmaxCodes.numel();
    const auto scales = q.nestedAbsmax.repeat_interleave(kNestedBlockSize).slice(0, 0, blocks);
    absmax = q.nestedMap.index({q.absmaxCodes.to(torch::kLong)}) * scales;
    absmax += q.offset;
  }
  const auto codes = q.codes.to(torch::kLong);
  const auto idx = torch::stack({codes.bitwise_right_shift(4), codes.bitwise_and(0x0F)}, 1).reshape(-1).slice(0, 0, n);
  const auto values = nf4Code().index({idx});
  const auto scales = absmax.repeat_interleave(q.blocksize).slice(0, 0, n);
  return (values * scales).view(q.shape);
}

int roundBaseToNf4(CausalLM& model, bool doubleQuant) {
  torch::NoGradGuard noGrad;
  int rounded = 0;
  for (auto& [name, param] : model.hfParameters()) {
    if (!nf4Linear(name)) continue;
    param.copy_(dequantizeNf4(quantizeNf4(param, doubleQuant)));
    ++rounded;
  }
  return rounded;
}

bool nf4Linear(const std::string& name) {
  static const std::regex kLinear(R"(model\.layers\.\d+\.(self_attn|mlp)\.[a-z_]+_proj\.weight)");
  return std::regex_match(name, kLinear);
}

bool storedQuantized(const safetensors::CheckpointReader& reader, const std::string& name) {
  return reader.find(name + ".quant_state.bitsandbytes__nf4") != nullptr ||
         reader.find(name + ".quant_state.bitsandbytes__fp4") != nullptr || reader.find(name + ".SCB") != nullptr;
}

Nf4Tensor readBnb4bit(const safetensors::CheckpointReader& reader, const std::string& name,
                      std::vector<std::string>& used) {
  const std::string& dir = reader.directory();
  if (reader.find(name + ".SCB") != nullptr) {
    RP_THROW(InputError,
             "{}: tensor '{}' is stored 8-bit (bitsandbytes LLM.int8, '{}.SCB'); supported: 4-bit NF4 "
             "(load_in_4bit with bnb_4bit_quant_type = \"nf4\") or an unquantised checkpoint",
             dir, name, name);
  }
  if (reader.find(name + ".quant_state.bitsandbytes__fp4") != nullptr) {
    RP_THROW(InputError,
             "{}: tensor '{}' is stored 4-bit FP4 (bitsandbytes__fp4); supported: NF4 (bnb_4bit_quant_type = \"nf4\") "
             "or an unquantised checkpoint",
             dir, name);
  }
  auto get = [&](const std::string& part) -> const safetensors::TensorView& {
    const safetensors::TensorView* view = reader.find(name + part);
    if (view == nullptr) {
      RP_THROW(InputError, "{}: tensor '{}' is stored NF4 but '{}{}' is missing from the checkpoint", dir, name, name,
               part);
    }
    used.push_back(view->name);
    return *view;
  };
  const auto& stateView = get(".quant_state.bitsandbytes__nf4");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(stateView.data), stateView.nbytes));
  } catch (const std::exception& e) {
    RP_THROW(InputError, "{}: '{}' is not the JSON of a bitsandbytes quant state: {}", dir, stateView.name, e.what());
  }
  Nf4Tensor q;
  try {
    q.shape = state.at("shape").get<std::vector<std::int64_t>>();
    q.blocksize = state.at("blocksize").get<std::int64_t>();
    q.nested = state.contains("nested_offset");
    if (q.nested) {
      q.offset = state.at("nested_offset").get<float>();
      if (state.value("nested_blocksize", kNestedBlockSize) != kNestedBlockSize) {
        RP_THROW(InputError, "{}: '{}': nested_blocksize {} (supported: {})", dir, stateView.name,
                 state.at("nested_blocksize").dump(), kNestedBlockSize);
      }
    }
    if (state.value("quant_type", std::string("nf4")) != "nf4") {
      RP_THROW(InputError, "{}: '{}': quant_type {} (supported: \"nf4\")", dir, stateView.name,
               state.at("quant_type").dump());
    }
  } catch (const nlohmann::json::exception& e) {
    RP_THROW(InputError, "{}: '{}' lacks a field of a bitsandbytes 4-bit quant state (shape, blocksize): {}", dir,
             stateView.name, e.what());
  }
  if (q.blocksize <= 0 || q.blocksize % 2 != 0) {
    RP_THROW(InputError, "{}: '{}': blocksize {} (supported: an even positive number, 64 as bitsandbytes writes)", dir,
             stateView.name, q.blocksize);
  }
  std::int64_t n = 1;
  for (auto d : q.shape) n *= d;
  const std::int64_t blocks = (n + q.blocksize - 1) / q.blocksize;
  auto tensor = [&](const std::string& part, safetensors::DType dtype, std::int64_t numel) {
    const auto& view = get(part);
    if (view.dtype != dtype || view.numel() != numel) {
      RP_THROW(InputError, "{}: '{}' is {} {}; the quant state of '{}' (shape {}) needs {} {} values", dir, view.name,
               safetensors::dtypeName(view.dtype), describeShape(view.shape), name, describeShape(q.shape), numel,
               safetensors::dtypeName(dtype));
    }
    return toTorch(view).reshape(-1).clone();
  };
  q.codes = tensor("", safetensors::DType::kU8, (n + 1) / 2);
  const auto map = tensor(".quant_map", safetensors::DType::kF32, 16);
  if (!torch::equal(map, nf4Code())) {
    RP_THROW(InputError, "{}: '{}.quant_map' is not the NF4 code", dir, name);
  }
  if (q.nested) {
    q.absmaxCodes = tensor(".absmax", safetensors::DType::kU8, blocks);
    q.nestedAbsmax =
        tensor(".nested_absmax", safetensors::DType::kF32, (blocks + kNestedBlockSize - 1) / kNestedBlockSize);
    q.nestedMap = tensor(".nested_quant_map", safetensors::DType::kF32, 256);
  } else {
    q.absmax = tensor(".absmax", safetensors::DType::kF32, blocks);
  }
  return q;
}

}  // namespace rp::model
