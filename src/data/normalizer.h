// Hugging Face normalizers: Prepend, Replace (a string pattern) and NFC, alone or in a Sequence. Each step keeps the
// input span of every byte it writes (what the prepended "▁" or a rewritten character came from).
// Thread-safety: immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/aligned_text.h"

namespace rp::data {

class Normalizer {
 public:
  Normalizer() = default;  // no normalizer: text passes unchanged
  // From tokenizer.json's "normalizer" (null: none); `source` names the file in errors.
  Normalizer(const nlohmann::json& spec, const std::string& source);

  AlignedText apply(AlignedText text) const;
  std::string apply(std::string_view text) const { return apply(AlignedText::identity(text, 0)).text; }

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace, kNfc } kind;
    std::string a, b;  // Prepend: a = text; Replace: a -> b
  };
  void add(const nlohmann::json& spec, const std::string& source);
  std::vector<Step> steps_;
};

}  // namespace rp::data
