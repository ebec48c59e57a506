// A model's chat template (data/jinja.h): the Jinja subset's parser and renderer, on a fixed conversation.
#include <nlohmann/json.hpp>

#include "data/jinja.h"
#include "fuzz_target.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  const data::jinja::Template t(std::string(data), "chat_template.jinja");
  static const auto messages = nlohmann::json::parse(R"([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>x</think>hello"},
      {"role": "user", "content": "bye"}, {"role": "assistant", "content": " ciao "}])");
  for (const bool prompt : {false, true}) {
    (void)t.render(
        {{"messages", messages}, {"add_generation_prompt", prompt}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  }
}

void writeSeeds(const std::string& dir) {
  if (const auto fixtures = fixturesDir(); !fixtures.empty()) {
    const auto config = nlohmann::json::parse(readFile(fixtures + "/tokenizers/qwen3/tokenizer_config.json"));
    writeSeed(dir, "qwen3.jinja", config.at("chat_template").get<std::string>());
  }
  writeSeed(
      dir, "llama3-style.jinja",
      "{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}\n"
      "    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n"
      "{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n"
      "{%- for message in messages %}\n"
      "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
      "'<|eot_id|>' }}\n{%- endfor %}\n"
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n");
  writeSeed(dir, "gemma-style.jinja",
            "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
            "{{ raise_exception('roles must alternate') }}{% endif %}{% if message['role'] == 'assistant' %}"
            "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
            "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}");
  writeSeed(dir, "generation.jinja",
            "{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% set ns.n = ns.n + 1 %}{% endfor %}"
            "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content | tojson }}"
            "{% endgeneration %}{% else %}{{ m.content.split('i')[-1].strip() ~ loop.index }}{% endif %}{% endfor %}"
            "{{ {'a': [1, 2.5, none, true]} | tojson(indent=2) }}{{ ns.n if ns.n is odd else 'even' }}");
}

}  // namespace rp::fuzz
