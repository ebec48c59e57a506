#include "data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_input.h"

namespace rp::data {
namespace {

using nlohmann::json;

class SampleBuilder {
 public:
  void add(std::string text, bool trainable) {
    if (text.empty()) return;
    if (!sample_.segments.empty() && sample_.segments.back().trainable == trainable) {
      sample_.segments.back().text += text;
    } else {
      sample_.segments.push_back({std::move(text), trainable});
    }
  }
  Sample take() {
    sample_.chat = true;
    return std::move(sample_);
  }

 private:
  Sample sample_;
};

Sample renderBuiltIn(const std::vector<Message>& messages, ChatTemplate::Kind kind) {
  SampleBuilder s;
  if (kind == ChatTemplate::Kind::kLlama3) s.add("<|begin_of_text|>", false);
  for (const auto& m : messages) {
    if (kind == ChatTemplate::Kind::kChatML) {
      s.add("<|im_start|>" + m.role + "\n", false);
      s.add(m.content + "<|im_end|>", m.role == "assistant");
      s.add("\n", false);
    } else {
      s.add("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n", false);
      s.add(m.content + "<|eot_id|>", m.role == "assistant");
    }
  }
  return s.take();
}

std::string tokenText(const json& token) {  // "<s>", {"content": "<s>", ...} or null
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token.at("content").is_string()) {
    return token.at("content").get<std::string>();
  }
  return "";
}

// Where reply `content` starts in `text` at or after `from`, and how long it is there: as given, trimmed (templates
// that `| trim` it), or after a reasoning block the template dropped (`...</think>` then the answer).
std::optional<std::pair<std::size_t, std::size_t>> findReply(const std::string& text, const std::string& content,
                                                             std::size_t from) {
  std::vector<std::string> forms{content};
  const auto a = content.find_first_not_of(" \t\n\r"), b = content.find_last_not_of(" \t\n\r");
  if (a != std::string::npos) forms.push_back(content.substr(a, b - a + 1));
  if (const auto end = content.rfind("</think>"); end != std::string::npos) {
    const std::string answer = content.substr(end + 8);
    forms.push_back(answer.substr(std::min(answer.size(), answer.find_first_not_of('\n'))));
  }
  for (const auto& form : forms) {
    if (form.empty()) continue;
    if (const auto at = text.find(form, from); at != std::string::npos) return std::pair{at, form.size()};
  }
  return std::nullopt;
}

json variables(const std::vector<Message>& messages, const ChatTemplate& t, bool generationPrompt) {
  json list = json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  json v{{"messages", list}, {"add_generation_prompt", generationPrompt}};
  if (!t.bosToken.empty()) v["bos_token"] = t.bosToken;  // unset ones stay undefined, as in transformers
  if (!t.eosToken.empty()) v["eos_token"] = t.eosToken;
  return v;
}

Sample renderModel(const std::vector<Message>& messages, const ChatTemplate& t) {
  jinja::Rendered r;
  try {
    r = t.model->render(variables(messages, t, false));
  } catch (const InputError& e) {
    throw std::invalid_argument(e.what());
  }
  // The trainable ranges: the template's generation blocks, or each reply found in order.
  std::vector<std::pair<std::size_t, std::size_t>> replies = r.generation;
  if (replies.empty()) {
    std::size_t from = 0;
    for (std::size_t k = 0; k < messages.size(); ++k) {
      if (messages[k].role != "assistant") continue;
      if (messages[k].content.find_first_not_of(" \t\n\r") == std::string::npos) continue;  // nothing to train
      const auto found = findReply(r.text, messages[k].content, from);
      if (!found) {
        throw std::invalid_argument(fmt::format(
            "assistant turn {} does not appear in the conversation as {} renders it (a template that rewrites "
            "replies needs {{% generation %}} markers; or set the template option to chatml or llama3)",
            k + 1, t.model->name()));
      }
      replies.emplace_back(found->first, found->first + found->second);
      from = found->first + found->second;
    }
  }
  SampleBuilder s;
  std::size_t at = 0;
  for (auto [begin, end] : replies) {
    for (const auto& marker : t.endMarkers) {  // the special token that closes the reply trains with it
      if (!marker.empty() && r.text.compare(end, marker.size(), marker) == 0) {
        end += marker.size();
        break;
      }
    }
    s.add(r.text.substr(at, begin - at), false);
    s.add(r.text.substr(begin, end - begin), true);
    at = end;
  }
  s.add(r.text.substr(at), false);
  return s.take();
}

}  // namespace

std::optional<ChatTemplate> loadModelChatTemplate(const std::string& tokenizerFile,
                                                  std::vector<std::string> endMarkers) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::is_directory(tokenizerFile) ? fs::path(tokenizerFile) : fs::path(tokenizerFile).parent_path();
  const fs::path configPath = dir / "tokenizer_config.json", jinjaPath = dir / "chat_template.jinja";
  json config = json::object();
  if (std::ifstream in(configPath); in) {
    config = readJson(configPath.string(), [&] { return json::parse(in); });
  }
  ChatTemplate t;
  t.kind = ChatTemplate::Kind::kModel;
  t.endMarkers = std::move(endMarkers);
  std::string source, name;
  if (std::ifstream in(jinjaPath); in) {
    source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    name = jinjaPath.string();
  } else if (config.contains("chat_template")) {
    name = configPath.string();
    source = readJson(name, [&] {
      const json& c = config.at("chat_template");
      if (c.is_string()) return c.get<std::string>();
      for (const auto& named : c) {
        if (named.at("name").get<std::string>() == "default") return named.at("template").get<std::string>();
      }
      RP_THROW(InputError, "{}: chat_template lists no template named \"default\"", name);
    });
  } else {
    return std::nullopt;
  }
  t.model = std::make_shared<const jinja::Template>(source, name);
  t.bosToken = tokenText(config.value("bos_token", json()));
  t.eosToken = tokenText(config.value("eos_token", json()));
  return t;
}

std::string renderPrompt(const std::vector<Message>& messages, const ChatTemplate& chatTemplate) {
  if (chatTemplate.kind == ChatTemplate::Kind::kModel) {
    return chatTemplate.model->render(variables(messages, chatTemplate, true)).text;
  }
  std::string text;
  for (const auto& segment : renderBuiltIn(messages, chatTemplate.kind).segments) text += segment.text;
  return text + (chatTemplate.kind == ChatTemplate::Kind::kChatML
                     ? "<|im_start|>assistant\n"
                     : "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

Sample renderChat(const std::vector<Message>& messages, const ChatTemplate& chatTemplate) {
  if (chatTemplate.kind == ChatTemplate::Kind::kModel) return renderModel(messages, chatTemplate);
  return renderBuiltIn(messages, chatTemplate.kind);
}

}  // namespace rp::data
