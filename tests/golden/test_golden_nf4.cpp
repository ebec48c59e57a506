// NF4 bases (model/nf4.h) against bitsandbytes and transformers (goldens from scripts/make_goldens.py: a
// generated model loaded in 4-bit NF4 by transformers with bitsandbytes on the CPU and saved with
// save_pretrained). Quantising the unquantised checkpoint gives the bytes bitsandbytes stored, code for code;
// loading the saved 4-bit checkpoint, or either checkpoint into an NF4 base (lora.base_dtype = "nf4", packed),
// computes the 4-bit model's logits.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "model/nf4.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/torch_bridge.h"
#include "support/fixtures.h"

namespace rp::model {
namespace {

struct Nf4Case {
  std::string name;
  bool doubleQuant;
  bool fromFixtures = false;  // the unquantised checkpoint is the shared fixture's
};

void PrintTo(const Nf4Case& c, std::ostream* os) {
  *os << c.name << (c.doubleQuant ? " (double quant)" : "");
}

class GoldenNf4 : public ::testing::TestWithParam<Nf4Case> {
 protected:
  void SetUp() override {
    const auto golden = test::goldenDir();
    RP_SKIP_UNLESS(golden, "golden directory");
    source_ = *golden + "/" + GetParam().name;
    quantized_ = source_ + "-nf4";
    if (GetParam().fromFixtures) {
      const auto fixtures = test::fixturesDir();
      RP_SKIP_UNLESS(fixtures, "shared fixtures");
      source_ = *fixtures + "/models/" + GetParam().name;
    }
    goldens_ = std::make_unique<safetensors::SafetensorsFile>(quantized_ + "/golden.safetensors");
  }

  torch::Tensor golden(const std::string& name) const { return toTorch(*goldens_->find(name)); }

  // |ours - transformers|_inf within 1e-5 of the logits' scale: both compute in float32 from the same weights.
  void expectTransformersLogits(CausalLM& model) const {
    torch::NoGradGuard noGrad;
    const auto ref = golden("logits");
    const auto logits = model.logits(causalBatch(golden("input_ids")));
    ASSERT_EQ(logits.sizes(), ref.sizes());
    const double scale = ref.abs().max().item<double>(), err = (logits - ref).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * scale) << "max abs error " << err << " vs reference scale " << scale;
  }

  ParamOptions nf4Options(bool allocate = true) const {
    return {torch::kFloat, allocate, /*nf4Base=*/true, GetParam().doubleQuant};
  }

  std::string source_, quantized_;
  std::unique_ptr<safetensors::SafetensorsFile> goldens_;
};

TEST_P(GoldenNf4, QuantizesToTheBytesBitsandbytesStored) {
  const safetensors::CheckpointReader original(source_), stored(quantized_);
  int tensors = 0;
  for (const auto& name : stored.names()) {
    if (!storedQuantized(stored, name)) continue;
    ++tensors;
    SCOPED_TRACE(name);
    std::vector<std::string> parts;
    const Nf4Tensor theirs = readBnb4bit(stored, name, parts);
    const Nf4Tensor ours = quantizeNf4(toTorch(original.get(name)), GetParam().doubleQuant);
    ASSERT_EQ(ours.shape, theirs.shape);
    ASSERT_EQ(ours.nested, theirs.nested);
    EXPECT_TRUE(torch::equal(ours.codes, theirs.codes)) << "NF4 codes differ";
    if (ours.nested) {
      EXPECT_EQ(ours.offset, theirs.offset);
      EXPECT_TRUE(torch::equal(ours.absmaxCodes, theirs.absmaxCodes)) << "8-bit absmax codes differ";
      EXPECT_TRUE(torch::equal(ours.nestedAbsmax, theirs.nestedAbsmax));
      EXPECT_TRUE(torch::equal(ours.nestedMap, theirs.nestedMap)) << "the dynamic map differs from bitsandbytes'";
    } else {
      EXPECT_TRUE(torch::equal(ours.absmax, theirs.absmax));
    }
    EXPECT_TRUE(torch::equal(dequantizeNf4(ours), dequantizeNf4(theirs)));
  }
  // Exactly the tensors an NF4 base of ours packs (every projection of a dense model; a MoE model's attention
  // and dense MLP layers).
  const CausalLM packed(loadModelConfig(source_), nf4Options(/*allocate=*/false));
  int ours = 0;
  for (const auto& [name, p] : packed.hfParameters()) ours += packed.packing(name) != nullptr ? 1 : 0;
  EXPECT_EQ(tensors, ours);
  EXPECT_GT(tensors, 0);
}

TEST_P(GoldenNf4, TheSavedFourBitCheckpointComputesTheTransformersLogits) {
  const auto model = loadHfModel(quantized_, torch::kFloat);
  expectTransformersLogits(*model);
}

// lora.base_dtype = "nf4" on the unquantised checkpoint: its base quantised at load into packed buffers.
TEST_P(GoldenNf4, AnNf4BaseComputesTheTransformersLogits) {
  CausalLM model(loadModelConfig(source_), nf4Options());
  loadHfWeights(model, source_);
  expectTransformersLogits(model);
}

// ... and on the 4-bit checkpoint: its NF4 tensors packed as stored, byte for byte.
TEST_P(GoldenNf4, AnNf4BaseTakesTheStoredBytesOfAFourBitCheckpoint) {
  CausalLM model(loadModelConfig(quantized_), nf4Options());
  loadHfWeights(model, quantized_);
  const safetensors::CheckpointReader stored(quantized_);
  for (const auto& [name, p] : model.hfParameters()) {
    const Nf4Packing* packing = model.packing(name);
    if (packing == nullptr) continue;
    std::vector<std::string> parts;
    auto theirs = torch::empty({packing->bytes()}, torch::kUInt8);
    packNf4(readBnb4bit(stored, name, parts), *packing, theirs);
    EXPECT_TRUE(torch::equal(p, theirs)) << name;
  }
  expectTransformersLogits(model);
}

// A bitsandbytes checkpoint whose LM head is stored quantized (transformers keeps it unquantized unless told
// otherwise): refused naming the tensor, not dequantized into a head the adapters were not trained against.
TEST(GoldenNf4Errors, AQuantizedLmHeadIsRefusedByName) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string quantized = *golden + "/llama3-tiny-nf4";  // an untied head
  const std::string dir = test::scratchDir() + "/quantized-head";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(quantized + "/config.json", dir + "/config.json");
  const safetensors::CheckpointReader stored(quantized);
  const std::string donor = "model.layers.0.self_attn.q_proj.weight";
  std::vector<safetensors::OutTensor> tensors;
  for (const auto& name : stored.names()) {
    const auto& view = stored.get(name);
    if (name == "lm_head.weight") continue;
    tensors.push_back({name, view.dtype, view.shape, view.data});
    if (name.rfind(donor, 0) == 0) {  // the head stored as the q projection's packed codes and quant state
      tensors.push_back({"lm_head.weight" + name.substr(donor.size()), view.dtype, view.shape, view.data});
    }
  }
  safetensors::writeFile(dir + "/model.safetensors", tensors);
  try {
    loadHfModel(dir, torch::kFloat);
    FAIL() << "a quantized LM head was loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'lm_head.weight' is stored quantized; supported: bitsandbytes "
                                         "checkpoints whose embedding and LM head are not"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenNf4,
                         ::testing::Values(Nf4Case{"llama3-tiny", true}, Nf4Case{"qwen3-tiny", false},
                                           Nf4Case{"tinystories-656k", false, true}, Nf4Case{"qwen3-moe-tiny", false}),
                         [](const auto& info) {
                           std::string name = info.param.name.substr(0, info.param.name.rfind("-tiny"));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace rp::model
