// Our chat-template renderer (data/jinja.h) against transformers' (the one apply_chat_template uses): the real
// Qwen3 template and Llama-3-, Mistral- and Gemma-style templates on conversations with and without a system
// message, multi-turn, reasoning blocks, tool turns, Unicode and odd whitespace — the same text, with and without
// the generation prompt, or the same refusal (raise_exception) (goldens from scripts/make_goldens.py).
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/jinja.h"
#include "support/fixtures.h"

namespace rp::data::jinja {
namespace {

class GoldenChatTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenChatTemplate, RendersAsTransformers) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const auto all = nlohmann::json::parse(std::ifstream(*golden + "/chat_templates.json"));
  if (!all.contains(GetParam())) GTEST_SKIP() << GetParam() << " absent (its tokenizer fixture is missing)";
  const auto& spec = all.at(GetParam());
  const Template t(spec.at("template").get<std::string>(), GetParam());
  int refused = 0;
  for (const auto& c : spec.at("cases")) {
    nlohmann::json variables{{"messages", c.at("messages")},
                             {"bos_token", spec.at("bos_token")},
                             {"eos_token", spec.at("eos_token")}};
    for (const auto& [key, prompt] : {std::pair{"rendered", false}, std::pair{"rendered_prompt", true}}) {
      variables["add_generation_prompt"] = prompt;
      if (c.contains("error")) {
        try {
          (void)t.render(variables);
          ADD_FAILURE() << "transformers refused, we rendered: " << c.at("messages").dump();
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find(c.at("error").get<std::string>()), std::string::npos) << e.what();
        }
        ++refused;
        continue;
      }
      EXPECT_EQ(t.render(variables).text, c.at(key).get<std::string>()) << c.at("messages").dump() << " " << key;
    }
  }
  if (GetParam() == "gemma-style") {
    EXPECT_GT(refused, 0) << "the system-message conversations are refused";
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, GoldenChatTemplate,
                         ::testing::Values("qwen3", "llama3-style", "mistral-style", "gemma-style"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace rp::data::jinja
