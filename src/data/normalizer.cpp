#include "data/normalizer.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/unicode.h"

namespace rp::data {
namespace {

AlignedText prepend(AlignedText text, const std::string& prefix) {
  if (text.empty()) return text;
  AlignedText out = text.emptyLike();
  out.append(prefix, text.cover(0, 1));
  out.append(text, 0, text.text.size());
  return out;
}

AlignedText replace(AlignedText text, const std::string& pattern, const std::string& with) {
  if (pattern.empty() || text.text.find(pattern) == std::string::npos) return text;
  AlignedText out = text.emptyLike();
  std::size_t pos = 0;
  for (std::size_t hit = text.text.find(pattern); hit != std::string::npos; hit = text.text.find(pattern, pos)) {
    out.append(text, pos, hit - pos);
    out.append(with, text.cover(hit, pattern.size()));
    pos = hit + pattern.size();
  }
  out.append(text, pos, text.text.size() - pos);
  return out;
}

// Note [Spans through NFC]
// NFC runs chunk by chunk, split before each character ICU says text can be normalized independently around (the
// chunks' NFC forms concatenate to the whole's). An unchanged chunk keeps its spans; a rewritten one maps all its
// bytes to the input the whole chunk came from. HF's alignment is finer there (a composed character takes its first
// source character's offsets, a mark composed into it none), so a token inside a rewritten chunk can cover a few
// more input characters than HF's offsets say — never fewer, and never across a chunk, so the loss mask, whose
// boundaries sit between chunks in any template, is the same.
AlignedText nfc(AlignedText text) {
  if (unicode::isNfc(text.text)) return text;
  AlignedText out = text.emptyLike();
  std::size_t chunk = 0;
  auto flush = [&](std::size_t end) {
    if (end == chunk) return;
    const std::string_view piece = std::string_view(text.text).substr(chunk, end - chunk);
    const std::string normalized = unicode::nfc(piece);
    if (normalized == piece) {
      out.append(text, chunk, end - chunk);
    } else {
      out.append(normalized, text.cover(chunk, end - chunk));
    }
    chunk = end;
  };
  for (std::size_t i = 0; i < text.text.size(); i += unicode::characterAt(text.text, i)) {
    if (i > 0 && unicode::nfcBoundaryBefore(text.text, i)) flush(i);
  }
  flush(text.text.size());
  return out;
}

}  // namespace

Normalizer::Normalizer(const nlohmann::json& spec, const std::string& source) {
  add(spec, source);
}

void Normalizer::add(const nlohmann::json& n, const std::string& source) {
  if (n.is_null()) return;
  const auto type = n.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : n.at("normalizers")) add(child, source);
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::kPrepend, n.at("prepend").get<std::string>(), ""});
  } else if (type == "Replace" && n.at("pattern").contains("String")) {
    steps_.push_back(
        {Step::Kind::kReplace, n.at("pattern").at("String").get<std::string>(), n.at("content").get<std::string>()});
  } else if (type == "NFC") {
    steps_.push_back({Step::Kind::kNfc, "", ""});
  } else {
    RP_THROW(InputError, "{}: normalizer {} is not supported (docs/tokenizer.md lists what is)", source, n.dump());
  }
}

AlignedText Normalizer::apply(AlignedText text) const {
  for (const auto& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kPrepend:
        text = prepend(std::move(text), step.a);
        break;
      case Step::Kind::kReplace:
        text = replace(std::move(text), step.a, step.b);
        break;
      case Step::Kind::kNfc:
        text = nfc(std::move(text));
        break;
    }
  }
  return text;
}

}  // namespace rp::data
