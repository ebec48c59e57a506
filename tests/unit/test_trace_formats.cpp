// The trace formats other tools read back (docs/trace-formats.md): compute span names and profile.json, each
// through its one writer and one reader; the checksum of TensorBoard's event files (trace/tensorboard.h).
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "support/fixtures.h"
#include "trace/formats.h"
#include "trace/tensorboard.h"

namespace rp::trace {
namespace {

TEST(ComputeSpanName, RoundTrips) {
  for (const ComputeSpan& s : {ComputeSpan{"fwd", 0, 2, 1, 3}, ComputeSpan{"fused", 5, 7, 0, 1},
                               ComputeSpan{"bwd", 3, 4, 15, 12345678901}, ComputeSpan{"recompute", 3, 4, 2, 7}}) {
    const std::string name = computeSpanName(s);
    const auto back = parseComputeSpanName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, s) << name;
  }
  EXPECT_EQ(computeSpanName({"bwd", 3, 4, 1, 2}), "bwd 3-4 mb 1 (step 2)");  // docs/trace-formats.md
}

TEST(ComputeSpanName, OtherSpansAreNotComputeSpans) {
  for (const char* name : {"upload 0-2", "wait: job 1 mb 0 (step 2) from rank 1", "fwd 0-2 mb 1",
                           "jump 0-2 mb 1 (step 3)", "fwd 0-2 mb 1 (step 3) trailing", "",
                           // Layers or microbatches the runtime never writes (fuzzing found the first).
                           "fused 29999999999999999999999999999999999999999-3 mb 0 (step 3)", "fwd -1-2 mb 0 (step 3)",
                           "fwd 3-2 mb 0 (step 3)", "fwd 0-2 mb -1 (step 3)", "bwd 0-2000000 mb 0 (step 3)"}) {
    EXPECT_FALSE(parseComputeSpanName(name).has_value()) << name;
  }
}

TEST(LayerProfile, RoundTrips) {
  const std::string path = test::scratchDir() + "/profile.json";
  const LayerProfileFile p{{0.5, 1.25, 2.0}, {0.0, 2.5, 4.0}, "2 | 1 | 1", 3, 4, "cuda:NVIDIA H100"};
  writeLayerProfile(path, p);
  const LayerProfileFile back = readLayerProfile(path);
  EXPECT_EQ(back.forwardMs, p.forwardMs);
  EXPECT_EQ(back.backwardMs, p.backwardMs);
  EXPECT_EQ(back.plan, p.plan);
  EXPECT_EQ(back.workers, 3);
  EXPECT_EQ(back.microbatches, 4);
  EXPECT_EQ(back.device, p.device);
  EXPECT_FALSE(back.modelled());
}

// An emulated device's times are its model's: the file says so, and the reader knows it.
TEST(LayerProfile, AnEmulatedRunsProfileSaysItsTimesAreModelled) {
  const std::string path = test::scratchDir() + "/profile.json";
  writeLayerProfile(path, {{0.5}, {1.0}, "", 1, 2, "emulated:rtx4090x8"});
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"("times": "modelled")"), std::string::npos) << text;
  EXPECT_TRUE(readLayerProfile(path).modelled());
}

TEST(LayerProfile, AHandMadeProfileNeedsOnlyTheTimes) {
  const std::string path = test::scratchDir() + "/profile.json";
  std::ofstream(path) << R"({"forward_ms": [1, 2], "backward_ms": [2, 4]})";
  const LayerProfileFile p = readLayerProfile(path);
  EXPECT_EQ(p.forwardMs.size(), 2u);
  EXPECT_TRUE(p.plan.empty());
  EXPECT_EQ(p.workers, 0);
  EXPECT_FALSE(p.modelled());
}

TEST(LayerProfile, BadFilesNameTheFileAndTheProblem) {
  const std::string dir = test::scratchDir();
  auto message = [](const std::string& path) {
    try {
      readLayerProfile(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(dir + "/absent.json").find("absent.json: cannot open"), std::string::npos);
  std::ofstream(dir + "/short.json") << R"({"forward_ms": [1, 2], "backward_ms": [2]})";
  EXPECT_NE(message(dir + "/short.json").find("forward_ms has 2 layers but backward_ms 1"), std::string::npos);
  std::ofstream(dir + "/none.json") << R"({"forward_ms": [1]})";
  EXPECT_NE(message(dir + "/none.json").find("none.json: expected"), std::string::npos);
}

// TensorBoard's record framing checksums with CRC-32C (Castagnoli): its published check value, "123456789" ->
// 0xE3069283 (RFC 3720, B.4's parameters), and the empty input.
TEST(TensorBoard, Crc32cHasTheCastagnoliCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

}  // namespace
}  // namespace rp::trace
