// Our tokenizer.json implementation against Hugging Face tokenizers' ids (tokenizer_cases.json from
// scripts/make_goldens.py, one case per line of the fixture text).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "support/fixtures.h"

namespace rp::data {
namespace {

TEST(GoldenTokenizer, TinyStoriesIdsEqualHuggingFace) {
  const auto golden = test::goldenDir();
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string casesPath = *golden + "/tinystories-656k/tokenizer_cases.json";
  ASSERT_TRUE(std::filesystem::exists(casesPath)) << casesPath;
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/models/tinystories-656k/tokenizer.json");
  const auto cases = nlohmann::json::parse(std::ifstream(casesPath));
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<std::int32_t>>();
    EXPECT_EQ(tokenizer.encode(text), expected) << text;
  }
}

TEST(GoldenTokenizer, DecodeInvertsEncodeOnTinyStories) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/models/tinystories-656k");
  const std::string text = "Once upon a time, there was a little dog named Max. He liked to run!";
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
}

}  // namespace
}  // namespace rp::data
