// A Jinja2 subset for chat templates (docs/data.md, "Chat templates"): what the chat templates of Qwen3,
// Llama-3.x, Mistral and Gemma use, rendered as transformers' apply_chat_template renders them (trim_blocks,
// lstrip_blocks, the template's final newline dropped, tojson as Python's json.dumps). A construct outside the
// subset is an InputError naming it and its line; so is a template that calls raise_exception().
// Thread-safety: a parsed Template is immutable; render() may run concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rp::data::jinja {

struct Node;

struct Rendered {
  std::string text;
  // Byte ranges of text rendered inside {% generation %} ... {% endgeneration %} (transformers' marker of
  // what the assistant generates), in order.
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};

class Template {
 public:
  // Parses `source`; `name` (e.g. the file it came from) prefixes every error.
  Template(const std::string& source, std::string name);
  ~Template();
  Template(Template&&) noexcept;

  // Renders with `variables` (a JSON object: messages, add_generation_prompt, bos_token, ...).
  Rendered render(const nlohmann::json& variables) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Node>> body_;
};

}  // namespace rp::data::jinja
