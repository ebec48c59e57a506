// The safetensors reader against files written byte by byte (support/safetensors_writer.h), valid and
// malformed. Every malformed case must be an InputError naming the file and the tensor.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "model/safetensors.h"
#include "support/fixtures.h"
#include "support/safetensors_writer.h"

namespace rp::safetensors {
namespace {

// Element k of float32 tensor data in a mapped file: copied out, as tensor data need not be 4-byte aligned
// there (the test writer does not pad the header).
float floatAt(const std::uint8_t* data, std::size_t k) {
  float v;
  std::memcpy(&v, data + k * sizeof(float), sizeof(float));
  return v;
}

using nlohmann::json;
using test::FloatTensor;

// Runs `fn`, expects an InputError whose message contains every string in `parts`.
template <typename Fn>
void expectInputError(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

class Safetensors : public ::testing::Test {
 protected:
  std::string dir = test::scratchDir();
  std::string file = dir + "/model.safetensors";
};

TEST_F(Safetensors, ReadsValuesShapesAndMetadata) {
  test::writeFloatSafetensors(file, {{"a", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {1}, {-7.5f}}}, {{"format", "pt"}});
  SafetensorsFile st(file);
  ASSERT_EQ(st.tensors().size(), 2u);
  const TensorView* a = st.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(floatAt(a->data, 5), 6.0f);
  EXPECT_EQ(floatAt(st.find("b")->data, 0), -7.5f);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.find("c"), nullptr);
}

TEST_F(Safetensors, ShorterThanHeaderLength) {
  std::ofstream(file, std::ios::binary) << "abc";
  expectInputError([&] { SafetensorsFile st(file); }, {file, "too short"});
}

TEST_F(Safetensors, HeaderLengthBeyondFile) {
  test::writeRawSafetensors(file, json::object(), {}, 1000);
  expectInputError([&] { SafetensorsFile st(file); }, {file, "header length 1000"});
}

TEST_F(Safetensors, HeaderNotJson) {
  std::ofstream out(file, std::ios::binary);
  const std::uint64_t n = 5;
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << "{oops";
  out.close();
  expectInputError([&] { SafetensorsFile st(file); }, {file, "not valid JSON"});
}

TEST_F(Safetensors, UnknownDtype) {
  test::writeRawSafetensors(file, {{"w", {{"dtype", "F24"}, {"shape", {1}}, {"data_offsets", {0, 3}}}}}, {0, 0, 0});
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'w'", "unknown dtype 'F24'"});
}

TEST_F(Safetensors, TruncatedDataSection) {
  test::writeFloatSafetensors(file, {{"w", {4}, {1, 2, 3, 4}}});
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 4);
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'w'", "run past the data section"});
}

TEST_F(Safetensors, OffsetsDisagreeWithShape) {
  test::writeRawSafetensors(file, {{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}},
                            std::vector<std::uint8_t>(12));
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'w'", "span 8 bytes", "needs 12"});
}

TEST_F(Safetensors, OffsetsBackwards) {
  test::writeRawSafetensors(file, {{"w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}},
                            std::vector<std::uint8_t>(8));
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'w'", "end before they begin"});
}

TEST_F(Safetensors, OverlappingTensors) {
  test::writeRawSafetensors(file,
                            {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                             {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}},
                            std::vector<std::uint8_t>(12));
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'a'", "'b'", "overlap"});
}

TEST_F(Safetensors, NegativeShape) {
  test::writeRawSafetensors(file, {{"w", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}},
                            std::vector<std::uint8_t>(4));
  expectInputError([&] { SafetensorsFile st(file); }, {file, "'w'", "non-negative"});
}

TEST_F(Safetensors, CheckpointResolvesMetadataAlias) {
  test::writeFloatSafetensors(file, {{"lm_head.weight", {2}, {1, 2}}},
                              {{"format", "pt"}, {"model.embed_tokens.weight", "lm_head.weight"}});
  CheckpointReader reader(dir);
  const TensorView* view = reader.find("model.embed_tokens.weight");
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->name, "lm_head.weight");
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"lm_head.weight"}));
}

TEST_F(Safetensors, CheckpointReadsIndexedShards) {
  test::writeFloatSafetensors(dir + "/model-00001-of-00002.safetensors", {{"a", {1}, {1}}});
  test::writeFloatSafetensors(dir + "/model-00002-of-00002.safetensors", {{"b", {1}, {2}}});
  std::ofstream(dir + "/model.safetensors.index.json")
      << json{{"metadata", {{"total_size", 8}}},
              {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}}
             .dump();
  CheckpointReader reader(dir);
  EXPECT_EQ(floatAt(reader.get("b").data, 0), 2.0f);
  EXPECT_NE(reader.get("b").file->find("00002-of-00002"), std::string::npos);
  expectInputError([&] { reader.get("c"); }, {dir, "'c'", "missing"});
}

TEST_F(Safetensors, CheckpointRejectsTensorStoredTwice) {
  test::writeFloatSafetensors(dir + "/s1.safetensors", {{"a", {1}, {1}}});
  test::writeFloatSafetensors(dir + "/s2.safetensors", {{"a", {1}, {2}}});
  std::ofstream(dir + "/model.safetensors.index.json")
      << json{{"weight_map", {{"a", "s1.safetensors"}, {"x", "s2.safetensors"}}}}.dump();
  expectInputError([&] { CheckpointReader reader(dir); }, {"'a'", "stored twice"});
}

TEST_F(Safetensors, CheckpointWithoutWeights) {
  expectInputError([&] { CheckpointReader reader(dir); }, {dir, "model.safetensors"});
}

}  // namespace
}  // namespace rp::safetensors
