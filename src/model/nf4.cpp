#include "model/nf4.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/libtorch.h"
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

std::int64_t blocksOf(std::int64_t n, std::int64_t blocksize) {
  return (n + blocksize - 1) / blocksize;
}

// The two NF4 values each byte stands for (high nibble first): [256, 2] float32, one table per device, made
// once and never freed (a CUDA tensor must not outlive the runtime at exit).
const torch::Tensor& byteTable(torch::Device device) {
  static std::mutex mutex;
  static auto* tables = new std::map<std::string, torch::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  auto& table = (*tables)[device.str()];
  if (!table.defined()) {
    const auto code = nf4Code();
    const auto byte = torch::arange(256, torch::kLong);
    table =
        torch::stack({code.index({byte.bitwise_right_shift(4)}), code.index({byte.bitwise_and(0x0F)})}, 1).to(device);
  }
  return table;
}

// n float32 values: the NF4 values of `codes` (ceil(n / 2) bytes) times their block's `absmax`.
torch::Tensor decode(const torch::Tensor& codes, const torch::Tensor& absmax, std::int64_t n, std::int64_t blocksize) {
  auto values = byteTable(codes.device()).index_select(0, codes.to(torch::kInt)).view(-1);
  const auto blocks = absmax.numel();
  if (values.numel() < blocks * blocksize)
    values = torch::constant_pad_nd(values, {0, blocks * blocksize - values.numel()});
  return (values.view({blocks, blocksize}) * absmax.view({blocks, 1})).view(-1).slice(0, 0, n);
}

// Double quantisation's absmax, as bitsandbytes' dequantize_blockwise, then + offset, in float32.
torch::Tensor nestedScales(const torch::Tensor& absmaxCodes, const torch::Tensor& nestedAbsmax,
                           const torch::Tensor& map, const torch::Tensor& offset) {
  const auto blocks = absmaxCodes.numel();
  // Each nested scale repeated over its block (an expand, not repeat_interleave: nothing sized by values on the
  // device, Note [Nothing read back per microbatch]).
  const auto scales =
      nestedAbsmax.view({-1, 1}).expand({nestedAbsmax.numel(), kNestedBlockSize}).reshape(-1).slice(0, 0, blocks);
  return (map.index_select(0, absmaxCodes.to(torch::kInt)) * scales).add_(offset);
}

// Where each part of a packed buffer starts (Note [Packed NF4]).
struct PackedOffsets {
  std::int64_t codes = 0, absmax = 0, absmaxCodes = 0, nested = 0, offset = 0, map = 0, total = 0;
};
constexpr std::int64_t kFloatBytes = 4;

std::int64_t align4(std::int64_t bytes) {
  return (bytes + kFloatBytes - 1) / kFloatBytes * kFloatBytes;
}

PackedOffsets offsetsOf(const Nf4Packing& p) {
  const std::int64_t n = p.numel(), blocks = blocksOf(n, kNf4BlockSize), codes = (n + 1) / 2;
  PackedOffsets o;
  if (!p.doubleQuant) {
    o.absmax = align4(codes);
    o.total = o.absmax + kFloatBytes * blocks;
    return o;
  }
  o.absmaxCodes = codes;
  o.nested = align4(codes + blocks);
  o.offset = o.nested + kFloatBytes * blocksOf(blocks, kNestedBlockSize);
  o.map = o.offset + kFloatBytes;
  o.total = o.map + kFloatBytes * 256;
  return o;
}

// Autograd for linearNf4: the weight is dequantized in forward and again in backward, never saved.
class Nf4LinearFunction : public torch::autograd::Function<Nf4LinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& packed, const torch::Tensor& bias, std::vector<std::int64_t> shape,
                               bool doubleQuant) {
    ctx->save_for_backward({packed});
    ctx->saved_data["shape"] = shape;
    ctx->saved_data["double_quant"] = doubleQuant;
    const auto weight = dequantizePacked(packed, {shape, doubleQuant}).to(x.scalar_type());
    return bias.numel() > 0 ? torch::linear(x, weight, bias) : torch::linear(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      const Nf4Packing p{ctx->saved_data["shape"].toIntVector(), ctx->saved_data["double_quant"].toBool()};
      dx = grads[0].matmul(dequantizePacked(ctx->get_saved_variables()[0], p).to(grads[0].scalar_type()));
    }
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::int64_t Nf4Packing::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t Nf4Packing::bytes() const {
  return offsetsOf(*this).total;
}

void packNf4(const Nf4Tensor& q, const Nf4Packing& packing, torch::Tensor into) {
  RP_CHECK(q.shape == packing.shape && q.blocksize == kNf4BlockSize && q.nested == packing.doubleQuant,
           "NF4 tensor of shape {} (blocks of {}, nested {}) packed as shape {} (nested {})", describeShape(q.shape),
           q.blocksize, q.nested, describeShape(packing.shape), packing.doubleQuant);
  const PackedOffsets o = offsetsOf(packing);
  RP_CHECK(into.device().is_cpu() && into.scalar_type() == torch::kUInt8 && into.dim() == 1 &&
               into.numel() == o.total && into.is_contiguous(),
           "a packed NF4 buffer of {} bytes is a contiguous CPU uint8 tensor of that size", o.total);
  into.zero_();
  auto put = [&](std::int64_t at, const torch::Tensor& part) {
    const auto bytes = part.contiguous().view(torch::kUInt8).reshape(-1);
    into.slice(0, at, at + bytes.numel()).copy_(bytes);
  };
  put(o.codes, q.codes);
  if (!q.nested) {
    put(o.absmax, q.absmax.to(torch::kFloat));
    return;
  }
  put(o.absmaxCodes, q.absmaxCodes);
  put(o.nested, q.nestedAbsmax.to(torch::kFloat));
  put(o.offset, torch::tensor({q.offset}, torch::kFloat));
  put(o.map, q.nestedMap.to(torch::kFloat));
}

torch::Tensor dequantizePacked(const torch::Tensor& packed, const Nf4Packing& packing) {
  const PackedOffsets o = offsetsOf(packing);
  RP_CHECK(packed.scalar_type() == torch::kUInt8 && packed.dim() == 1 && packed.numel() == o.total,
           "a packed NF4 weight of shape {} is {} bytes, got a {} tensor of {} elements", describeShape(packing.shape),
           o.total, c10::toString(packed.scalar_type()), packed.numel());
  const std::int64_t n = packing.numel(), blocks = blocksOf(n, kNf4BlockSize);
  auto floats = [&](std::int64_t at, std::int64_t count) {
    return packed.slice(0, at, at + kFloatBytes * count).view(torch::kFloat);
  };
  const auto absmax = packing.doubleQuant ? nestedScales(packed.slice(0, o.absmaxCodes, o.absmaxCodes + blocks),
                                                         floats(o.nested, blocksOf(blocks, kNestedBlockSize)),
                                                         floats(o.map, 256), floats(o.offset, 1))
                                          : floats(o.absmax, blocks);
  return decode(packed.slice(0, o.codes, o.codes + (n + 1) / 2), absmax, n, kNf4BlockSize).view(packing.shape);
}

torch::Tensor linearNf4(const torch::Tensor& x, const torch::Tensor& packed, const Nf4Packing& packing,
                        const torch::Tensor& bias) {
  // No bias: an empty tensor (a custom function's inputs are all defined).
  return Nf4LinearFunction::apply(x, packed, bias.defined() ? bias : torch::empty({0}, x.options()), packing.shape,
                                  packing.doubleQuant);
}

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
  const Nf4Packing shape{q.shape, q.nested};
  const auto absmax =
      q.nested ? nestedScales(q.absmaxCodes, q.nestedAbsmax, q.nestedMap, torch::tensor({q.offset}, torch::kFloat))
               : q.absmax;
  return decode(q.codes, absmax, shape.numel(), q.blocksize).view(q.shape);
}

bool nf4Linear(const std::string& name) {
  static const std::regex kLinear(
      R"(model\.layers\.\d+\.((self_attn|mlp)\.[a-z_]+_proj|linear_attn\.(in_proj_[a-z]+|out_proj))\.weight)");
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
  const std::int64_t n = Nf4Packing{q.shape}.numel(), blocks = blocksOf(n, q.blocksize);
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
