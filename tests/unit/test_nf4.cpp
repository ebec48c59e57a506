// NF4 (model/nf4.h) on its own: what a quantised value is, the partial last block, the NF4 base of a run and
// what a bitsandbytes checkpoint that is not 4-bit NF4 gets. Parity with bitsandbytes itself is in
// tests/golden/test_golden_nf4.cpp.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "common/error.h"
#include "model/libtorch.h"

#include "model/causal_lm.h"
#include "model/nf4.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/fixtures.h"

namespace rp::model {
namespace {

// Every value comes back as the NF4 code nearest to value / absmax (no code is nearer), times its block's
// absmax; the block's largest magnitude exactly. 1000 values: a partial last block of 40.
TEST(Nf4, EachValueIsItsBlocksNearestCodeTimesTheBlocksAbsmax) {
  torch::manual_seed(3);
  const auto w = torch::randn({10, 100});
  const Nf4Tensor q = quantizeNf4(w, false);
  ASSERT_EQ(q.codes.numel(), 500);
  ASSERT_EQ(q.absmax.numel(), 16);
  Nf4Tensor all;  // the 16 code values, in order: one block of codes 0..15 with absmax 1
  all.shape = {16};
  all.codes = torch::tensor({0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF}, torch::kUInt8);
  all.absmax = torch::ones({1});
  const auto codes = dequantizeNf4(all);
  const auto back = dequantizeNf4(q).reshape(-1), flat = w.reshape(-1);
  for (std::int64_t b = 0; b < 16; ++b) {
    const auto block = flat.slice(0, b * 64, std::min<std::int64_t>(1000, b * 64 + 64));
    const float absmax = block.abs().max().item<float>();
    EXPECT_EQ(q.absmax[b].item<float>(), absmax);
    const auto x = (block / absmax).unsqueeze(1);
    const auto nearest = std::get<0>((x - codes.unsqueeze(0)).abs().min(1));
    const auto chosen = (x.squeeze(1) - back.slice(0, b * 64, b * 64 + block.numel()) / absmax).abs();
    EXPECT_LE((chosen - nearest).max().item<float>(), 1e-6F) << "block " << b << ": a nearer code was not chosen";
  }
  EXPECT_EQ(back.abs().max().item<float>(), flat.abs().max().item<float>());
}

// Double quantisation keeps the scales to 8 bits: dequantised, they are within the dynamic map's resolution
// of the exact ones, and the offset is their mean.
TEST(Nf4, DoubleQuantisedScalesStayCloseToTheExactOnes) {
  torch::manual_seed(4);
  const auto w = torch::randn({64, 512});
  const Nf4Tensor exact = quantizeNf4(w, false), nested = quantizeNf4(w, true);
  ASSERT_TRUE(nested.nested);
  EXPECT_EQ(nested.absmaxCodes.numel(), 512);
  EXPECT_EQ(nested.nestedAbsmax.numel(), 2);
  EXPECT_FLOAT_EQ(nested.offset, exact.absmax.mean().item<float>());
  EXPECT_TRUE(torch::equal(nested.codes, exact.codes)) << "the 4-bit codes do not depend on how scales are stored";
  const auto rel = ((dequantizeNf4(nested) - dequantizeNf4(exact)).abs().max() / w.abs().max()).item<double>();
  EXPECT_GT(rel, 0);
  EXPECT_LT(rel, 2e-2);
}

// A checkpoint of one tensor `w` [4, 64] stored as bitsandbytes stores a 4-bit tensor, with `state` as its
// quant state JSON and `extra` tensors beside it.
std::string bnbCheckpoint(const std::string& dir, const std::string& state, bool withAbsmax = true,
                          const std::string& extra = "") {
  std::filesystem::create_directories(dir);
  const Nf4Tensor q = quantizeNf4(torch::randn({4, 64}), false);
  const auto map =
      torch::tensor({-1.0F, -0.6961928009986877F, -0.5250730514526367F, -0.39491748809814453F, -0.28444138169288635F,
                     -0.18477343022823334F, -0.09105003625154495F, 0.0F, 0.07958029955625534F, 0.16093020141124725F,
                     0.24611230194568634F, 0.33791524171829224F, 0.44070982933044434F, 0.5626170039176941F,
                     0.7229568362236023F, 1.0F});
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  std::vector<safetensors::OutTensor> tensors{
      {name, safetensors::DType::kU8, {128, 1}, q.codes.data_ptr()},
      {name + ".quant_map", safetensors::DType::kF32, {16}, map.data_ptr()},
      {name + ".quant_state.bitsandbytes__" + (state.find("fp4") != std::string::npos ? "fp4" : "nf4"),
       safetensors::DType::kU8,
       {static_cast<std::int64_t>(state.size())},
       state.data()}};
  if (withAbsmax) tensors.push_back({name + ".absmax", safetensors::DType::kF32, {4}, q.absmax.data_ptr()});
  const std::uint8_t scb[4] = {1, 2, 3, 4};
  if (!extra.empty()) tensors.push_back({name + extra, safetensors::DType::kU8, {4}, scb});
  safetensors::writeFile(dir + "/model.safetensors", tensors);
  return name;
}

std::string readError(const std::string& dir, const std::string& name) {
  try {
    const safetensors::CheckpointReader reader(dir);
    std::vector<std::string> used;
    readBnb4bit(reader, name, used);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Nf4, ABitsandbytesTensorThatIsNotWholeNf4IsNamed) {
  const std::string scratch = test::scratchDir();
  const std::string nf4 = R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [4, 64]})";
  auto name = bnbCheckpoint(scratch + "/ok", nf4);
  EXPECT_EQ(readError(scratch + "/ok", name), "no error");
  name = bnbCheckpoint(scratch + "/fp4", R"({"quant_type": "fp4", "blocksize": 64, "shape": [4, 64]})");
  EXPECT_NE(readError(scratch + "/fp4", name).find("tensor '" + name + "' is stored 4-bit FP4"), std::string::npos)
      << readError(scratch + "/fp4", name);
  name = bnbCheckpoint(scratch + "/int8", nf4, true, ".SCB");
  EXPECT_NE(readError(scratch + "/int8", name).find("is stored 8-bit (bitsandbytes LLM.int8"), std::string::npos)
      << readError(scratch + "/int8", name);
  name = bnbCheckpoint(scratch + "/partial", nf4, false);
  EXPECT_NE(readError(scratch + "/partial", name).find("is stored NF4 but '" + name + ".absmax' is missing"),
            std::string::npos)
      << readError(scratch + "/partial", name);
  name = bnbCheckpoint(scratch + "/shape", R"({"quant_type": "nf4", "blocksize": 64, "shape": [8, 64]})");
  EXPECT_NE(readError(scratch + "/shape", name)
                .find("is U8 [128, 1]; the quant state of '" + name + "' (shape [8, 64]) needs 256 U8 values"),
            std::string::npos)
      << readError(scratch + "/shape", name);
  name = bnbCheckpoint(scratch + "/json", "{not json");
  EXPECT_NE(readError(scratch + "/json", name).find("is not the JSON of a bitsandbytes quant state"), std::string::npos)
      << readError(scratch + "/json", name);
}

// A model whose weights fill whole 64-value NF4 blocks.
ModelConfig blockSizedConfig() {
  ModelConfig c;
  c.vocabSize = 40;
  c.hiddenSize = 64;
  c.intermediateSize = 128;
  c.numLayers = 2;
  c.numHeads = 2;
  c.numKvHeads = 1;
  c.headDim = 32;
  c.maxPositions = 32;
  return c;
}

// A packed buffer (Note [Packed NF4]) stands for the values its NF4 tensor does, single or double quantised,
// partial last block included, and is 4-bit-sized: ~0.56 bytes per value, ~0.52 with double quantisation.
TEST(Nf4, APackedBufferDequantizesToItsTensorsValues) {
  torch::manual_seed(4);
  for (bool doubleQuant : {false, true}) {
    for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{96, 256}, {7, 37}}) {
      SCOPED_TRACE(fmt::format("double quant {}, shape [{}]", doubleQuant, fmt::join(shape, ", ")));
      const Nf4Packing packing{shape, doubleQuant};
      const Nf4Tensor q = quantizeNf4(torch::randn(shape), doubleQuant);
      auto packed = torch::full({packing.bytes()}, 0xAB, torch::kUInt8);  // every byte written
      packNf4(q, packing, packed);
      EXPECT_TRUE(torch::equal(dequantizePacked(packed, packing), dequantizeNf4(q)));
    }
    const double perValue = static_cast<double>(Nf4Packing{{4096, 4096}, doubleQuant}.bytes()) / (4096.0 * 4096.0);
    EXPECT_NEAR(perValue, doubleQuant ? 0.5 + 1.0 / 64 + 4.0 / (64 * 256) : 0.5 + 4.0 / 64, 1e-4);
  }
}

// linearNf4 computes what nn.Linear computes over the dequantized weight, forward and backward (the input's
// gradient; the frozen weight and bias get none), in float32 and bfloat16.
TEST(Nf4, APackedLinearEqualsTheLinearOfItsDequantizedWeight) {
  torch::manual_seed(6);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const Nf4Packing packing{{48, 64}, true};
    auto packed = torch::empty({packing.bytes()}, torch::kUInt8);
    packNf4(quantizeNf4(torch::randn({48, 64}), true), packing, packed);
    const auto weight = dequantizePacked(packed, packing).to(dtype);
    const auto bias = torch::randn({48}).to(dtype);
    const auto x = torch::randn({3, 5, 64}).to(dtype).requires_grad_(true);
    const auto xRef = x.detach().clone().requires_grad_(true);
    const auto y = linearNf4(x, packed, packing, bias);
    const auto yRef = torch::linear(xRef, weight, bias);
    EXPECT_TRUE(torch::equal(y, yRef));
    const auto g = torch::randn_like(yRef);
    y.backward(g);
    yRef.backward(g);
    EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat), xRef.grad().to(torch::kFloat), 1e-5, 1e-5));
  }
}

// The base of a run: the 7 projections of each decoder layer are packed, nothing else (embedding, head,
// norms keep the model dtype); the model computes the logits of the unpacked model whose projections hold the
// NF4 round trip.
TEST(Nf4, AnNf4BasePacksTheDecoderProjectionsOnly) {
  torch::manual_seed(5);
  CausalLM dense(blockSizedConfig(), torch::kFloat);
  CausalLM packed(blockSizedConfig(), ParamOptions{torch::kFloat, true, /*nf4Base=*/true, false});
  const auto packedParams = packed.hfParameters();
  int packedCount = 0;
  {
    torch::NoGradGuard noGrad;
    std::size_t i = 0;
    for (auto& [name, p] : dense.hfParameters()) {
      const auto& [packedName, q] = packedParams.at(i++);
      ASSERT_EQ(name, packedName);
      p.copy_(torch::randn(p.sizes()));
      const Nf4Packing* packing = packed.packing(name);
      EXPECT_EQ(packing != nullptr, nf4Linear(name)) << name;
      if (packing == nullptr) {
        q.copy_(p);
        continue;
      }
      ++packedCount;
      EXPECT_EQ(q.scalar_type(), torch::kUInt8);
      EXPECT_EQ(packing->shape, p.sizes().vec());
      const Nf4Tensor nf4 = quantizeNf4(p, false);
      packNf4(nf4, *packing, q);
      p.copy_(dequantizeNf4(nf4));
    }
  }
  EXPECT_EQ(packedCount, 14);
  torch::NoGradGuard noGrad;
  const auto batch = causalBatch(torch::randint(0, 40, {2, 9}));
  EXPECT_TRUE(torch::equal(packed.logits(batch), dense.logits(batch)));
  // A mixture of experts: its attention projections only (transformers 5 keeps the experts as parameters and
  // the router unconverted).
  ModelConfig moe = blockSizedConfig();
  moe.arch = Architecture::kQwen3Moe;
  moe.moe.numExperts = 4;
  moe.moe.expertsPerToken = 2;
  moe.moe.expertIntermediateSize = 8;
  const CausalLM experts(moe, ParamOptions{torch::kFloat, false, true, false});
  int expertsPacked = 0;
  for (const auto& [name, p] : experts.hfParameters()) expertsPacked += experts.packing(name) != nullptr ? 1 : 0;
  EXPECT_EQ(expertsPacked, 8);
}

}  // namespace
}  // namespace rp::model
