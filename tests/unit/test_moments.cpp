// AdamW's moments in checkpoints (run/moments.h): 8-bit codes and absmax saved and read back into parts of whole
// blocks bit for bit, and a resume in the other width converted (Note [Moments across widths]): 8-bit moments
// dequantized into float32 parts that start inside a block, float32 moments quantized into 8-bit parts.
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "optim/blockwise8.h"
#include "run/moments.h"
#include "support/fixtures.h"

namespace rp::run {
namespace {

constexpr std::size_t kN = 5000;  // 19 whole blocks and a short one
const std::vector<std::int64_t> kShape{50, 100};

// An AdamW over `parts` of one tensor (`stateBits` wide), each stepped three times with seeded gradients, as the
// ranks of a pipeline hold it.
struct Parts {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::vector<float> param, grad;
  optim::AdamW adamw;
  Parts(int stateBits, std::vector<std::pair<std::size_t, std::size_t>> parts, bool step)
      : ranges(std::move(parts)), param(kN), grad(kN), adamw([&] {
          optim::AdamWConfig c;
          c.stateBits = stateBits;
          return c;
        }()) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : param) p = normal(rng);
    for (const auto& [b, e] : ranges)
      adamw.add("w", param.data() + b, grad.data() + b, e - b, nullptr, optim::ModelCopy::kNone, kN);
    for (int s = 0; step && s < 3; ++s) {
      for (float& g : grad) g = normal(rng);
      adamw.step(1e-3);
    }
  }
  // Each part saved into its own shard in dir, as each rank writes its own; the manifest lists their slices.
  checkpoint::Manifest save(const std::string& dir) {
    checkpoint::Manifest m;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      MomentSlices moments;
      std::vector<checkpoint::Slice> slices;
      moments.add(adamw, i, "w", kShape, ranges[i].first, ranges[i].second, nullptr, slices);
      const auto records =
          checkpoint::writeShard(std::filesystem::path(dir) / ("shard" + std::to_string(i) + ".h5"), slices);
      m.slices.insert(m.slices.end(), records.begin(), records.end());
    }
    return m;
  }
  std::size_t restore(const std::string& dir, const checkpoint::Manifest& m) {
    MomentSlices moments;
    std::vector<checkpoint::Slice> slices;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      moments.add(adamw, i, "w", kShape, ranges[i].first, ranges[i].second, &m, slices);
    }
    checkpoint::readSlices(dir, m, slices);
    return moments.convert(dir, m);
  }
};

TEST(MomentSlices, EightBitMomentsComeBackBitwiseInOtherBlockParts) {
  const std::string dir = test::scratchDir();
  Parts saved(8, {{0, 2560}, {2560, kN}}, true);
  ASSERT_TRUE(saved.adamw.eightBit(0));
  const auto m = saved.save(dir);
  EXPECT_TRUE(savedEightBit(m, "w"));
  Parts resumed(8, {{0, 1024}, {1024, 4096}, {4096, kN}}, false);
  EXPECT_EQ(resumed.restore(dir, m), 0u);
  std::vector<std::uint8_t> codesM, codesV;  // the saved parts, end to end: the tensor's
  std::vector<float> absmaxM;
  for (std::size_t i = 0; i < 2; ++i) {
    codesM.insert(codesM.end(), saved.adamw.codesM(i).begin(), saved.adamw.codesM(i).end());
    codesV.insert(codesV.end(), saved.adamw.codesV(i).begin(), saved.adamw.codesV(i).end());
    absmaxM.insert(absmaxM.end(), saved.adamw.absmaxM(i).begin(), saved.adamw.absmaxM(i).end());
  }
  for (std::size_t i = 0; i < resumed.ranges.size(); ++i) {
    const auto [b, e] = resumed.ranges[i];
    EXPECT_EQ(std::memcmp(resumed.adamw.codesM(i).data(), codesM.data() + b, e - b), 0) << i;
    EXPECT_EQ(std::memcmp(resumed.adamw.codesV(i).data(), codesV.data() + b, e - b), 0) << i;
    EXPECT_EQ(std::memcmp(resumed.adamw.absmaxM(i).data(), absmaxM.data() + b / 256, 4 * optim::q8::blocksOf(e - b)), 0)
        << i;
  }
}

TEST(MomentSlices, EightBitMomentsDequantizeIntoFloat32PartsStartingInsideABlock) {
  const std::string dir = test::scratchDir();
  Parts saved(8, {{0, kN}}, true);
  const auto m = saved.save(dir);
  std::vector<float> mWhole(kN), vWhole(kN);
  optim::q8::dequantize(optim::q8::signedMap(), saved.adamw.codesM(0).data(), saved.adamw.absmaxM(0).data(), kN,
                        mWhole.data());
  optim::q8::dequantize(optim::q8::unsignedMap(), saved.adamw.codesV(0).data(), saved.adamw.absmaxV(0).data(), kN,
                        vWhole.data());
  Parts resumed(32, {{0, 1667}, {1667, 3334}, {3334, kN}}, false);
  EXPECT_EQ(resumed.restore(dir, m), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto [b, e] = resumed.ranges[i];
    EXPECT_EQ(std::memcmp(resumed.adamw.expAvg(i).data(), mWhole.data() + b, 4 * (e - b)), 0) << i;
    EXPECT_EQ(std::memcmp(resumed.adamw.expAvgSq(i).data(), vWhole.data() + b, 4 * (e - b)), 0) << i;
  }
}

TEST(MomentSlices, Float32MomentsQuantizeIntoTheBlocksOfTheTensor) {
  const std::string dir = test::scratchDir();
  Parts saved(32, {{0, 1667}, {1667, kN}}, true);
  const auto m = saved.save(dir);
  EXPECT_FALSE(savedEightBit(m, "w"));
  std::vector<float> mWhole, vWhole;
  for (std::size_t i = 0; i < 2; ++i) {
    mWhole.insert(mWhole.end(), saved.adamw.expAvg(i).begin(), saved.adamw.expAvg(i).end());
    vWhole.insert(vWhole.end(), saved.adamw.expAvgSq(i).begin(), saved.adamw.expAvgSq(i).end());
  }
  std::vector<std::uint8_t> codesM(kN), codesV(kN);
  std::vector<float> absmaxM(optim::q8::blocksOf(kN)), absmaxV(optim::q8::blocksOf(kN));
  optim::q8::quantize(optim::q8::signedMap(), mWhole.data(), kN, codesM.data(), absmaxM.data());
  optim::q8::quantize(optim::q8::unsignedMap(), vWhole.data(), kN, codesV.data(), absmaxV.data());
  Parts resumed(8, {{0, 2560}, {2560, kN}}, false);
  EXPECT_EQ(resumed.restore(dir, m), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto [b, e] = resumed.ranges[i];
    EXPECT_EQ(std::memcmp(resumed.adamw.codesM(i).data(), codesM.data() + b, e - b), 0) << i;
    EXPECT_EQ(std::memcmp(resumed.adamw.codesV(i).data(), codesV.data() + b, e - b), 0) << i;
    EXPECT_EQ(std::memcmp(resumed.adamw.absmaxV(i).data(), absmaxV.data() + b / 256, 4 * optim::q8::blocksOf(e - b)), 0)
        << i;
  }
}

}  // namespace
}  // namespace rp::run
