#include "data/pretokenizer.h"

#include <array>
#include <unordered_map>

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/unicode.h"

namespace rp::data {
namespace {

// GPT-2 bytes_to_unicode(): printable bytes map to themselves, the rest to U+0100 onwards.
struct ByteTable {
  std::array<std::string, 256> toUtf8;
  std::unordered_map<std::uint32_t, unsigned char> fromCodepoint;
  ByteTable() {
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const std::uint32_t cp = printable ? b : next++;
      std::string utf8;
      if (cp < 0x80) {
        utf8 = std::string(1, static_cast<char>(cp));
      } else {
        utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
      toUtf8[b] = utf8;
      fromCodepoint[cp] = static_cast<unsigned char>(b);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

// GPT-2's pattern, which ByteLevel applies itself when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

std::string byteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += table().toUtf8[b];
  return out;
}

std::string byteLevelDecode(std::string_view mapped) {
  std::string out;
  for (std::size_t i = 0; i < mapped.size();) {
    const auto b0 = static_cast<unsigned char>(mapped[i]);
    std::uint32_t cp = b0;
    std::size_t len = 1;
    if ((b0 >> 5) == 0x6 && i + 1 < mapped.size()) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(mapped[i + 1]) & 0x3Fu);
      len = 2;
    } else if (b0 >= 0x80) {
      len = std::min<std::size_t>(mapped.size() - i, (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 1);
      out.append(mapped.substr(i, len));
      i += len;
      continue;
    }
    const auto it = table().fromCodepoint.find(cp);
    if (it != table().fromCodepoint.end())
      out.push_back(static_cast<char>(it->second));
    else
      out.append(mapped.substr(i, len));
    i += len;
  }
  return out;
}

// One step: a regex split (Isolated/Removed behaviour), the ByteLevel mapping or Metaspace.
struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
  std::unique_ptr<icu::RegexPattern> pattern;  // kSplit (also ByteLevel with use_regex)
  bool removeMatches = false;                  // behavior "Removed"
  bool addPrefixSpace = false;                 // ByteLevel
  std::string replacement;                     // Metaspace: what spaces become ("▁")
  MetaspacePrepend prepend = MetaspacePrepend::kAlways;
  bool splitOnReplacement = true;  // Metaspace `split`: each replacement starts a new word

  // Metaspace: spaces replaced, the replacement prepended as the scheme says (`first`: only to the piece that
  // starts the input), then split before every replacement (HF's MergedWithNext).
  void applyMetaspace(const AlignedText& piece, bool startsInput, std::vector<AlignedText>& out) const {
    if (piece.empty()) return;
    AlignedText text = piece.emptyLike();
    const bool hasPrefix = piece.text[0] == ' ' || piece.text.rfind(replacement, 0) == 0;
    if (!hasPrefix && (prepend == MetaspacePrepend::kAlways || (prepend == MetaspacePrepend::kFirst && startsInput))) {
      text.append(replacement, piece.cover(0, 1));
    }
    for (std::size_t i = 0; i < piece.text.size(); ++i) {
      if (piece.text[i] == ' ') {
        text.append(replacement, piece.cover(i, 1));
      } else {
        text.append(piece, i, 1);
      }
    }
    if (!splitOnReplacement) {
      out.push_back(std::move(text));
      return;
    }
    std::size_t begin = 0;
    for (std::size_t at = text.text.find(replacement, 1); at != std::string::npos;
         at = text.text.find(replacement, at + 1)) {
      if (at > begin) out.push_back(text.slice(begin, at - begin));
      begin = at;
    }
    if (begin < text.text.size()) out.push_back(text.slice(begin, text.text.size() - begin));
  }

  // Splits `piece` into the regex matches and the gaps between them (gaps kept as pieces). Invalid UTF-8 is matched,
  // and kept, as U+FFFD, as ICU reads it.
  void applyRegex(const AlignedText& piece, std::vector<AlignedText>& out) const {
    struct Character {
      std::size_t byte, length;
      bool valid;
    };
    std::vector<Character> chars;
    std::vector<std::size_t> charAtUnit;  // UTF-16 unit -> character
    for (std::size_t i = 0; i < piece.text.size();) {
      Character c{i, 0, false};
      c.length = unicode::characterAt(piece.text, i, &c.valid);
      charAtUnit.insert(charAtUnit.end(), c.valid && c.length == 4 ? 2 : 1, chars.size());
      chars.push_back(c);
      i += c.length;
    }
    charAtUnit.push_back(chars.size());
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString text = icu::UnicodeString::fromUTF8(piece.text);
    if (static_cast<std::size_t>(text.length()) + 1 != charAtUnit.size()) {
      RP_THROW(SystemError, "ICU read {} UTF-16 units from a {}-byte piece, expected {}", text.length(),
               piece.text.size(), charAtUnit.size() - 1);
    }
    std::unique_ptr<icu::RegexMatcher> matcher(pattern->matcher(text, status));
    if (U_FAILURE(status)) RP_THROW(SystemError, "ICU regex matcher: {}", u_errorName(status));
    int32_t last = 0;
    auto emit = [&](int32_t begin, int32_t end) {
      if (end <= begin) return;
      AlignedText word = piece.emptyLike();
      for (std::size_t k = charAtUnit[static_cast<std::size_t>(begin)]; k < charAtUnit[static_cast<std::size_t>(end)];
           ++k) {
        const Character& c = chars[k];
        if (c.valid) {
          word.append(piece, c.byte, c.length);
        } else {
          word.append("\xEF\xBF\xBD", piece.cover(c.byte, c.length));
        }
      }
      out.push_back(std::move(word));
    };
    while (matcher->find(status) && U_SUCCESS(status)) {
      const int32_t start = matcher->start(status), end = matcher->end(status);
      emit(last, start);
      if (!removeMatches) emit(start, end);
      last = end;
    }
    emit(last, text.length());
  }
};

PreTokenizer::PreTokenizer(const nlohmann::json& spec, const std::string& source) : source_(source) {
  add(spec);
}
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add(const nlohmann::json& spec) {
  const std::string type = spec.value("type", "");
  auto compile = [&](const std::string& regex) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError parseError{};
    std::unique_ptr<icu::RegexPattern> p(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(regex), parseError, status));
    if (U_FAILURE(status)) {
      RP_THROW(InputError, "{}: pre_tokenizer regex does not compile ({} at offset {}): {}", source_,
               u_errorName(status), parseError.offset, regex);
    }
    return p;
  };
  if (type == "Sequence") {
    for (const auto& child : spec.at("pretokenizers")) add(child);
  } else if (type == "Split") {
    auto step = std::make_unique<Step>();
    step->kind = Step::Kind::kSplit;
    const auto& pattern = spec.at("pattern");
    if (!pattern.contains("Regex"))
      RP_THROW(InputError, "{}: Split pre_tokenizer with a String pattern is not supported", source_);
    step->pattern = compile(pattern.at("Regex").get<std::string>());
    const std::string behavior = spec.value("behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Removed") {
      RP_THROW(InputError, "{}: Split behavior '{}' is not supported (Isolated, Removed)", source_, behavior);
    }
    if (spec.value("invert", false)) RP_THROW(InputError, "{}: Split with invert=true is not supported", source_);
    step->removeMatches = behavior == "Removed";
    steps_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    if (spec.value("use_regex", true)) {
      auto split = std::make_unique<Step>();
      split->kind = Step::Kind::kSplit;
      split->pattern = compile(kGpt2Pattern);
      steps_.push_back(std::move(split));
    }
    auto step = std::make_unique<Step>();
    step->kind = Step::Kind::kByteLevel;
    step->addPrefixSpace = spec.value("add_prefix_space", false);
    steps_.push_back(std::move(step));
    byteLevel_ = true;
  } else if (type == "Metaspace") {
    auto step = std::make_unique<Step>();
    step->kind = Step::Kind::kMetaspace;
    step->replacement = spec.value("replacement", std::string("\u2581"));
    if (step->replacement.empty()) RP_THROW(InputError, "{}: Metaspace with an empty replacement", source_);
    step->prepend = parseMetaspacePrepend(spec, source_);
    step->splitOnReplacement = spec.value("split", true);
    steps_.push_back(std::move(step));
  } else {
    RP_THROW(InputError, "{}: pre_tokenizer '{}' is not supported (docs/tokenizer.md lists what is)", source_, type);
  }
}

std::vector<AlignedText> PreTokenizer::split(AlignedText text, bool startsInput) const {
  std::vector<AlignedText> pieces;
  pieces.push_back(std::move(text));
  for (const auto& step : steps_) {
    std::vector<AlignedText> next;
    if (step->kind == Step::Kind::kSplit) {
      for (const auto& piece : pieces) step->applyRegex(piece, next);
    } else if (step->kind == Step::Kind::kMetaspace) {
      for (std::size_t i = 0; i < pieces.size(); ++i) step->applyMetaspace(pieces[i], startsInput && i == 0, next);
    } else {
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        const AlignedText& piece = pieces[i];
        AlignedText mapped = piece.emptyLike();
        if (step->addPrefixSpace && i == 0 && !piece.empty() && piece.text[0] != ' ') {
          mapped.append(table().toUtf8[' '], piece.cover(0, 1));
        }
        for (std::size_t b = 0; b < piece.text.size(); ++b) {
          mapped.append(table().toUtf8[static_cast<unsigned char>(piece.text[b])], piece.cover(b, 1));
        }
        next.push_back(std::move(mapped));
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

MetaspacePrepend parseMetaspacePrepend(const nlohmann::json& spec, const std::string& source) {
  if (!spec.contains("prepend_scheme")) {  // tokenizers < 0.19 wrote add_prefix_space instead
    return spec.value("add_prefix_space", true) ? MetaspacePrepend::kAlways : MetaspacePrepend::kNever;
  }
  const std::string scheme = spec.at("prepend_scheme").get<std::string>();
  if (scheme == "always") return MetaspacePrepend::kAlways;
  if (scheme == "first") return MetaspacePrepend::kFirst;
  if (scheme == "never") return MetaspacePrepend::kNever;
  RP_THROW(InputError, "{}: Metaspace prepend_scheme '{}': expected always, first or never", source, scheme);
}

}  // namespace rp::data
