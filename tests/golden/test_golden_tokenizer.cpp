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

// Byte offset -> the character index Python (and HF's offsets) count in.
std::size_t characterIndex(const std::string& text, std::size_t byte) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i)
    chars += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
  return chars;
}

// Our spans are HF's offsets (in characters). Where NFC rewrites characters, HF aligns each composed one to its first
// source character; ours span the run of characters NFC rewrote together (Note [Spans through NFC] in
// data/normalizer.cpp): there they contain HF's.
bool spansMatch(const std::string& text, const std::vector<Span>& ours, const nlohmann::json& offsets,
                bool nfcChanges) {
  const auto theirs = offsets.get<std::vector<std::pair<std::size_t, std::size_t>>>();
  if (ours.size() != theirs.size()) return false;
  for (std::size_t k = 0; k < ours.size(); ++k) {
    const std::size_t begin = characterIndex(text, ours[k].begin), end = characterIndex(text, ours[k].end);
    const bool same = begin == theirs[k].first && end == theirs[k].second;
    const bool contains = begin <= theirs[k].first && theirs[k].second <= end;
    if (!same && !(nfcChanges && contains)) return false;
  }
  return true;
}

TEST_P(GoldenTokenizer, IdsAndDecodeEqualHuggingFace) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string path = *golden + "/tokenizers/" + GetParam() + ".json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (its tokenizer fixture is missing)";
  const auto golden_ = nlohmann::json::parse(std::ifstream(path));
  const auto tokenizer = Tokenizer::fromFile(golden_.at("tokenizer").get<std::string>(), Tokenizer::Pipeline::kFile);
  const auto& cases = golden_.at("cases");
  ASSERT_GE(cases.size(), 1000u);
  int idMismatches = 0, decodeMismatches = 0, spanMismatches = 0, roundTrips = 0;
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<std::int32_t>>();
    const auto ids = tokenizer.encode(text);
    if (ids != expected && ++idMismatches <= 5) ADD_FAILURE() << "ids differ for: " << text;
    // Without the post-processor's tokens: the same ids, each with the span of the text HF's offsets give it.
    const Encoding plain = tokenizer.encodeWithSpans(text);
    const auto expectedPlain = c.at("ids_plain").get<std::vector<std::int32_t>>();
    if (plain.ids != expectedPlain && ++idMismatches <= 5) ADD_FAILURE() << "plain ids differ for: " << text;
    if (!spansMatch(text, plain.spans, c.at("offsets_plain"), c.at("nfc_changes").get<bool>()) &&
        ++spanMismatches <= 5) {
      ADD_FAILURE() << "spans differ from HF's offsets for: " << text;
    }
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
  EXPECT_EQ(spanMismatches, 0) << "of " << cases.size() << " cases";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTokenizer,
                         ::testing::Values("qwen3", "phi_3", "tinystories_656k", "builtin_tiny", "llama3_style",
                                           "metaspace_style"),
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

// The model directories as transformers' AutoTokenizer loads them (their tokenizer class may build another pipeline
// than tokenizer.json's): ids, spans and decodes.
class GoldenTransformersTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTransformersTokenizer, IdsSpansAndDecodeEqualAutoTokenizer) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string path = *golden + "/tokenizers/" + GetParam() + ".transformers.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (its tokenizer fixture is missing)";
  const auto spec = nlohmann::json::parse(std::ifstream(path));
  const auto tokenizer = Tokenizer::fromFile(spec.at("directory").get<std::string>());
  int idMismatches = 0, spanMismatches = 0, decodeMismatches = 0;
  for (const auto& c : spec.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    const Encoding ours = tokenizer.encodeWithSpans(text);
    if (ours.ids != c.at("ids").get<std::vector<std::int32_t>>() && ++idMismatches <= 5) {
      ADD_FAILURE() << "ids differ for: " << text;
    } else if (!c.at("drops_characters").get<bool>() &&
               !spansMatch(text, ours.spans, c.at("offsets"), c.at("nfc_changes").get<bool>()) &&
               ++spanMismatches <= 5) {
      ADD_FAILURE() << "spans differ from the offsets for: " << text;
    }
    if (tokenizer.decode(c.at("ids").get<std::vector<std::int32_t>>()) != c.at("decoded").get<std::string>() &&
        ++decodeMismatches <= 5) {
      ADD_FAILURE() << "decode differs for: " << text;
    }
  }
  EXPECT_EQ(idMismatches + spanMismatches + decodeMismatches, 0)
      << "of " << spec.at("cases").size() << " cases (" << spec.at("class") << ")";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTransformersTokenizer,
                         ::testing::Values("qwen3", "phi_3", "tinystories_656k"),
                         [](const auto& info) { return info.param; });

// The real Phi-3 tokenizer on llama.cpp's 46 test strings, against the ids HF's AutoTokenizer gave for them
// (encode(text, add_special_tokens=False); the fixture's NOTICE).
TEST(Phi3Tokenizer, FixtureReferenceIds) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  // As HF tokenizers reads the file (which transformers 4 used as written, when these ids were made).
  const auto tokenizer =
      Tokenizer::fromFile(*fixtures + "/tokenizers/phi-3-mini-4k-instruct/tokenizer.json", Tokenizer::Pipeline::kFile);
  const std::string base = *fixtures + "/tokenizers/ggml-vocab-tests/ggml-vocab-phi-3.gguf";
  std::stringstream inputs;
  inputs << std::ifstream(base + ".inp").rdbuf();
  const std::string all = inputs.str(), separator = "\n__ggml_vocab_test__\n";
  std::ifstream out(base + ".out");
  int cases = 0;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = std::min(all.find(separator, at), all.size());
    const std::string text = all.substr(at, end - at);
    at = end + separator.size();
    std::string line;
    ASSERT_TRUE(std::getline(out, line)) << "fewer expected lines than test strings";
    std::vector<std::int32_t> expected;
    std::istringstream ids(line);
    for (std::int32_t id; ids >> id;) expected.push_back(id);
    EXPECT_EQ(tokenizer.encode(text, false), expected) << text;
    ++cases;
  }
  EXPECT_EQ(cases, 46);
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

// A built-in template whose special tokens the tokenizer lacks is refused for chat data, naming them: Llama-3's
// layout on the Qwen3 tokenizer would train on "<|eot_id|>" split into plain text. ChatML's tokens it has.
TEST(Qwen3Tokenizer, ChatDataWithATemplateWhoseTokensTheTokenizerLacksIsRefused) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/tokenizers/qwen3");
  const std::string data = ::testing::TempDir() + "/chat.jsonl";
  std::ofstream(data) << R"({"instruction": "Say hi", "output": "hi"})"
                      << "\n";
  DatasetOptions options;
  options.format = "alpaca";
  options.paths = {data};
  options.chatTemplate = "llama3";
  try {
    loadDataset(options, tokenizer);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("data.template \"llama3\": the tokenizer " + *fixtures +
                                         "/tokenizers/qwen3/tokenizer.json has no special token <|begin_of_text|>, "
                                         "<|start_header_id|>, <|end_header_id|>, <|eot_id|>"),
              std::string::npos)
        << e.what();
  }
  options.chatTemplate = "chatml";
  EXPECT_EQ(loadDataset(options, tokenizer).documentCount(), 1u);
}

// SFT masks with the real Qwen3 tokenizer and the built-in ChatML layout: exactly the assistant reply and its
// <|im_end|> are trainable.
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
                                   resolveChatTemplate("chatml", tokenizer));
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

// The model's own template (Qwen3's, from its tokenizer_config.json, which "auto" picks): the sample tokenizes
// back to transformers' rendering, and only the replies as rendered — a reasoning block the template drops from an
// earlier turn is not trained, the empty think block it puts before the last reply is context — and each
// <|im_end|> are trainable.
TEST(Qwen3Tokenizer, TheModelsOwnTemplateMasksTheRepliesAsRendered) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const auto tokenizer = Tokenizer::fromFile(*fixtures + "/tokenizers/qwen3");
  const ChatTemplate model = resolveChatTemplate("auto", tokenizer);
  ASSERT_EQ(model.kind, ChatTemplate::Kind::kModel);
  const auto cases = nlohmann::json::parse(std::ifstream(*golden + "/chat_templates.json")).at("qwen3").at("cases");
  DatasetOptions options;
  options.format = "sharegpt";
  auto trainedAndAll = [&](const Sample& sample) {
    const TokenizedCorpus corpus = tokenizeSamples({sample}, tokenizer, options);
    std::vector<std::int32_t> trained, all(corpus.tokens.begin(), corpus.tokens.end());
    for (std::size_t i = 0; i < corpus.tokens.size(); ++i) {
      if (corpus.trainable(i)) trained.push_back(corpus.tokens[i]);
    }
    return std::pair{tokenizer.decode(trained, false), tokenizer.decode(all, false)};
  };
  int checked = 0;
  for (const auto& c : cases) {
    std::vector<Message> messages;
    for (const auto& m : c.at("messages")) {
      if (m.at("role") == "tool") break;  // records carry system/user/assistant turns only
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    if (messages.size() != c.at("messages").size()) continue;
    EXPECT_EQ(trainedAndAll(renderChat(messages, model)).second, c.at("rendered").get<std::string>())
        << c.at("messages").dump();
    ++checked;
  }
  EXPECT_GE(checked, 10);
  EXPECT_EQ(trainedAndAll(renderChat({{"user", "hi"}, {"assistant", "hello"}}, model)).first, "hello<|im_end|>");
  EXPECT_EQ(trainedAndAll(renderChat({{"user", "q1"},
                                      {"assistant", "<think>r1</think>a1"},
                                      {"user", "q2"},
                                      {"assistant", "<think>\nr2\n</think>\n\na2"}},
                                     model))
                .first,
            "a1<|im_end|><think>\nr2\n</think>\n\na2<|im_end|>");
}

}  // namespace
}  // namespace rp::data
