// Chat data tokenized as transformers tokenizes it: every real chat template among the fixtures, loaded as a model's
// own template (chat_template.jinja beside the real tokenizer_config.json) on the real Qwen3 (byte-level BPE) and
// Phi-3 (SentencePiece-style, Prepend("▁"), chat tokens with rstrip) tokenizers, and each family's templates on a
// tokenizer of its family's kind with its special tokens (Llama 3, the R1 distills, Mistral's Tekken, Phi-4 and
// Phi-4-mini: byte-level BPE; Gemma: spaces replaced by "▁" with byte fallback; Mistral v3: Metaspace; built by
// HF tokenizers where the real tokenizer.json is not among the fixtures), gives for each conversation the ids of
// transformers' apply_chat_template(tokenize=True), or refuses the conversations transformers refuses; the loss
// mask stays on the assistant's reply (goldens from scripts/make_goldens.py, scripts/goldens_text.py).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "support/fixtures.h"

namespace rp::data {
namespace {

namespace fs = std::filesystem;

// The answer the last message's reply trains on, when the conversation ends with a non-empty one: its text after a
// reasoning block, trimmed.
std::string lastAnswer(const nlohmann::json& messages) {
  const auto& last = messages.back();
  if (last.at("role") != "assistant") return "";
  std::string text = last.at("content").get<std::string>();
  if (const auto end = text.rfind("</think>"); end != std::string::npos) text = text.substr(end + 8);
  const auto a = text.find_first_not_of(" \t\r\n"), b = text.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : text.substr(a, b - a + 1);
}

class GoldenChatTokens : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenChatTokens, IdsEqualApplyChatTemplate) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const auto all = nlohmann::json::parse(std::ifstream(*golden + "/chat_tokens.json"));
  if (!all.contains(GetParam())) GTEST_SKIP() << GetParam() << " absent (its tokenizer fixture is missing)";
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto& spec = all.at(GetParam());
  const std::string directory = spec.at("directory").get<std::string>();
  const Tokenizer tokenizer = Tokenizer::fromFile(directory + "/tokenizer.json");
  DatasetOptions options;
  options.format = "sharegpt";
  int compared = 0, refused = 0;
  for (const auto& [file, cases] : spec.at("templates").items()) {
    SCOPED_TRACE(file);
    // The model directory as a user has it: the tokenizer's own config beside the template.
    const std::string model = test::scratchDir() + "/" + file;
    fs::create_directories(model);
    fs::copy_file(directory + "/tokenizer_config.json", model + "/tokenizer_config.json");
    {
      std::ifstream in(*fixtures + "/chat-templates/" + file, std::ios::binary);
      std::ofstream(model + "/chat_template.jinja", std::ios::binary) << in.rdbuf();
    }
    const auto chatTemplate = loadModelChatTemplate(model + "/tokenizer.json", tokenizer.specialTokens());
    ASSERT_TRUE(chatTemplate.has_value());
    for (const auto& c : cases) {
      std::vector<Message> messages;
      for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
      if (c.contains("error")) {
        EXPECT_THROW((void)renderChat(messages, *chatTemplate), std::invalid_argument)
            << c.at("messages").dump() << " transformers: " << c.at("error");
        ++refused;
        continue;
      }
      const auto corpus = tokenizeSamples({renderChat(messages, *chatTemplate)}, tokenizer, options);
      const auto expected = c.at("ids").get<std::vector<std::int32_t>>();
      ASSERT_EQ(corpus.documentCount(), expected.empty() ? 0u : 1u);
      EXPECT_EQ(corpus.tokens, expected) << c.at("messages").dump()
                                         << "\n ours: " << tokenizer.decode(corpus.tokens, false)
                                         << "\n theirs: " << tokenizer.decode(expected, false);
      // The mask: the tokens trained on spell the last reply's answer.
      std::vector<std::int32_t> trained;
      for (std::size_t k = 0; k < corpus.tokens.size(); ++k) {
        if (corpus.trainable(k)) trained.push_back(corpus.tokens[k]);
      }
      if (const std::string answer = lastAnswer(c.at("messages")); !answer.empty()) {
        EXPECT_NE(tokenizer.decode(trained, false).find(answer), std::string::npos)
            << c.at("messages").dump() << "\n trained on: " << tokenizer.decode(trained, false);
      }
      ++compared;
    }
  }
  const auto templates = static_cast<int>(spec.at("templates").size());
  EXPECT_GT(templates, 0) << "no template of this tokenizer's family";
  EXPECT_GE(compared, 8 * templates) << "conversations compared (" << refused << " refused)";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenChatTokens,
                         ::testing::Values("qwen3", "phi-3", "llama3", "deepseek-r1", "gemma", "mistral-spm",
                                           "mistral-tekken", "phi-4", "phi-4-mini"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace rp::data
