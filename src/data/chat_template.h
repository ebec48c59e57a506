// Conversations rendered into training samples (docs/data.md, "Chat templates"): the built-in ChatML and
// Llama-3 layouts, or the model's own Jinja chat template (chat_template.jinja or tokenizer_config.json's
// chat_template beside its tokenizer.json), with the loss mask on the assistant replies only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/jinja.h"

namespace rp::data {

struct Segment {
  std::string text;
  bool trainable = true;
};

struct Sample {
  std::vector<Segment> segments;
  bool chat = false;  // rendered by a chat template (carries its own begin/end tokens)
};

// One chat turn. role: system | user | assistant.
struct Message {
  std::string role;
  std::string content;
};

struct ChatTemplate {
  enum class Kind { kChatML, kLlama3, kModel } kind = Kind::kChatML;
  // kModel: the parsed template, the bos_token / eos_token it is rendered with, and the special tokens that
  // close a reply (trained with it when one follows the reply's text).
  std::shared_ptr<const jinja::Template> model;
  std::string bosToken, eosToken;
  std::vector<std::string> endMarkers;

  static ChatTemplate builtIn(Kind kind) {
    ChatTemplate t;
    t.kind = kind;
    return t;
  }
};

// The model's template from the directory of `tokenizerFile`: chat_template.jinja, else tokenizer_config.json's
// "chat_template" (a string, or a list of named templates: "default"); nullopt when it has none. `endMarkers`:
// the tokenizer's special tokens. Errors name the file.
std::optional<ChatTemplate> loadModelChatTemplate(const std::string& tokenizerFile,
                                                  std::vector<std::string> endMarkers);

// Renders a conversation; the assistant replies and the special token closing each are the trainable segments.
// With the model's template: the replies rendered inside {% generation %} when the template marks them, else
// each reply's text found in order in the rendering (as given, trimmed, or after a reasoning block the template
// dropped). Throws std::invalid_argument (a bad record) when the template refuses the conversation or a reply
// cannot be found.
Sample renderChat(const std::vector<Message>& messages, const ChatTemplate& chatTemplate);

// The conversation rendered for the model to continue with the assistant's reply (add_generation_prompt).
// InputError when the template refuses it.
std::string renderPrompt(const std::vector<Message>& messages, const ChatTemplate& chatTemplate);

}  // namespace rp::data
