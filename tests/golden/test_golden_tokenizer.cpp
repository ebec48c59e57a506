// Our tokenizer.json implementation against Hugging Face tokenizers: ids and decodes on thousands of real
// lines and Unicode edge cases (goldens from scripts/make_goldens.py), and the fixture's published Qwen3
// reference ids.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "support/fixtures.h"

namespace rp::data {
namespace {

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizer, IdsAndDecodeEqualHuggingFace) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string path = *golden + "/tokenizers/" + GetParam() + ".json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (its tokenizer fixture is missing)";
  const auto golden_ = nlohmann::json::parse(std::ifstream(path));
  const auto tokenizer = Tokenizer::fromFile(golden_.at("tokenizer").get<std::string>());
  const auto& cases = golden_.at("cases");
  ASSERT_GE(cases.size(), 1000u);
  int idMismatches = 0, decodeMismatches = 0, roundTrips = 0;
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<std::int32_t>>();
    const auto ids = tokenizer.encode(text);
    if (ids != expected && ++idMismatches <= 5) ADD_FAILURE() << "ids differ for: " << text;
    const auto decoded = tokenizer.decode(expected);
    if (decoded != c.at("decoded").get<std::string>() && ++decodeMismatches <= 5) {
      ADD_FAILURE() << "decode differs for: " << text << "\n ours: " << decoded;
    }
    // Where HF round-trips the text, so must we.
    if (c.at("decoded").get<std::string>() == text) {
      EXPECT_EQ(tokenizer.decode(ids), text);
      ++roundTrips;
    }
  }
  if (GetParam() != "tinystories_656k") {
    EXPECT_GT(roundTrips, 1000) << "byte-level tokenizers round-trip";
  }
  EXPECT_EQ(idMismatches, 0) << "of " << cases.size() << " cases";
  EXPECT_EQ(decodeMismatches, 0) << "of " << cases.size() << " cases";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTokenizer,
                         ::testing::Values("qwen3", "tinystories_656k", "builtin_tiny", "llama3_style", "metaspace_style"),
                         [](const auto& info) { return info.param; });

// The fixture's reference ids (llama.cpp's test vocabulary cases, produced by HF tokenizers).
TEST(Qwen3Tokenizer, FixtureReferenceIds) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string dir = *fixtures + "/tokenizers/qwen3";
  const auto tokenizer = Tokenizer::fromFile(dir + "/tokenizer.json");
  std::ifstream in(dir + "/reference_ids.tsv");
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string text = nlohmann::json::parse(line.substr(0, tab)).get<std::string>();  // a quoted string
    std::vector<std::int32_t> expected;
    std::istringstream ids(line.substr(tab + 1));
    for (std::int32_t id; ids >> id;) expected.push_back(id);
    EXPECT_EQ(tokenizer.encode(text), expected) << text;
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

TEST(Tokenizer, UnsupportedComponentIsNamed) {
  const std::string path = test::scratchDir() + "/tokenizer.json";
  std::ofstream(path) << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  try {
    Tokenizer::fromFile(path);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": model type 'WordPiece' is not supported"), std::string::npos)
        << e.what();
  }
}

TEST(Qwen3Tokenizer, SpecialTokens) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/tokenizers/qwen3");
  EXPECT_EQ(tokenizer.tokenId("<|im_start|>"), 151644);
  const auto ids = tokenizer.encode("<|im_start|>user");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 151644);
  EXPECT_EQ(tokenizer.decode(ids, /*skipSpecialTokens=*/false), "<|im_start|>user");
  EXPECT_EQ(tokenizer.decode(ids), "user");
}

// SFT masks with the real Qwen3 tokenizer: exactly the assistant reply and its <|im_end|> are trainable.
TEST(Qwen3Tokenizer, ChatMLMaskCoversTheAssistantReplyOnly) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/tokenizers/qwen3");
  DatasetOptions options;
  options.format = "sharegpt";
  const Sample sample = renderChat({{"system", "Be brief."},
                                    {"user", "Capital of France?"},
                                    {"assistant", "Paris."},
                                    {"user", "And Italy?"},
                                    {"assistant", "Rome."}},
                                   resolveChatTemplate("auto", tokenizer));
  const TokenizedCorpus corpus = tokenizeSamples({sample}, tokenizer, options);
  ASSERT_EQ(corpus.documentCount(), 1u);
  std::vector<std::int32_t> trained, all(corpus.tokens.begin(), corpus.tokens.end());
  for (std::size_t i = 0; i < corpus.tokens.size(); ++i) {
    if (corpus.trainable(i)) trained.push_back(corpus.tokens[i]);
  }
  EXPECT_EQ(tokenizer.decode(trained, /*skipSpecialTokens=*/false), "Paris.<|im_end|>Rome.<|im_end|>");
  EXPECT_EQ(tokenizer.decode(all, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
            "<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nAnd Italy?<|im_end|>\n"
            "<|im_start|>assistant\nRome.<|im_end|>\n");
}

}  // namespace
}  // namespace rp::data
