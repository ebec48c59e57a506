#include "data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/bpe.h"

namespace rp::data {
namespace {

using nlohmann::json;

struct ReplaceRule {
  std::string pattern;
  std::string content;
};

struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special;
};

std::string replaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t hit = text.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(text, pos, hit - pos).append(to);
    pos = hit + from.size();
  }
  out.append(text, pos, std::string::npos);
  return out;
}

bool isByteToken(const std::string& t) { return t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>'; }

bool validUtf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    std::size_t len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

// HF's ByteFallback decoder: each run of <0xHH> tokens becomes its bytes when they form valid UTF-8,
// otherwise one U+FFFD per byte.
std::vector<std::string> fuseByteTokens(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < tokens.size();) {
    if (!isByteToken(tokens[i])) {
      out.push_back(tokens[i++]);
      continue;
    }
    std::string bytes;
    std::size_t count = 0;
    for (; i < tokens.size() && isByteToken(tokens[i]); ++i, ++count) {
      bytes.push_back(static_cast<char>(std::stoi(tokens[i].substr(3, 2), nullptr, 16)));
    }
    if (validUtf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (std::size_t k = 0; k < count; ++k) out.push_back("\xEF\xBF\xBD");
    }
  }
  return out;
}

// Length of the UTF-8 sequence starting with byte `lead` (1 for invalid lead bytes, as bytes).
std::size_t utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, std::int32_t> vocab;
  std::vector<std::string> pieces;  // id -> token string
  MergeTable merges;
  std::int32_t unkId = -1;
  bool byteFallback = false;
  bool fuseUnk = false;
  std::vector<ReplaceRule> normalizers;  // Prepend is a rule with an empty pattern
  std::vector<AddedToken> added;
  std::unordered_set<std::int32_t> specialIds;
  std::vector<std::int32_t> prefixIds, suffixIds;  // post-processor, single sequence
  // Decoder steps in order.
  std::vector<json> decoders;

  [[noreturn]] void unsupported(const std::string& what) const {
    RP_THROW(InputError, "{}: {} is not supported (docs/tokenizer.md lists what is)", source, what);
  }

  void loadModel(const json& model) {
    if (model.value("type", "") != "BPE") unsupported(fmt::format("model type '{}'", model.value("type", "?")));
    for (const auto& [token, id] : model.at("vocab").items()) {
      const auto i = id.get<std::int32_t>();
      vocab[token] = i;
      if (static_cast<std::size_t>(i) >= pieces.size()) pieces.resize(static_cast<std::size_t>(i) + 1);
      pieces[static_cast<std::size_t>(i)] = token;
    }
    std::int32_t rank = 0;
    for (const auto& merge : model.at("merges")) {
      std::string left, right;
      if (merge.is_string()) {
        const auto text = merge.get<std::string>();
        const auto space = text.find(' ');
        if (space == std::string::npos) RP_THROW(InputError, "{}: merge '{}' has no space separator", source, text);
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else {
        left = merge.at(0).get<std::string>();
        right = merge.at(1).get<std::string>();
      }
      const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
      if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
        RP_THROW(InputError, "{}: merge #{} '{} {}' refers to a token missing from the vocabulary", source, rank, left,
                 right);
      }
      merges[{l->second, r->second}] = MergeRule{rank++, m->second};
    }
    if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
      const auto unk = model.at("unk_token").get<std::string>();
      unkId = vocab.count(unk) ? vocab.at(unk) : -1;
    }
    byteFallback = model.value("byte_fallback", false);
    fuseUnk = model.value("fuse_unk", false);
    if (model.contains("continuing_subword_prefix") && !model.at("continuing_subword_prefix").is_null()) {
      unsupported("BPE continuing_subword_prefix");
    }
    if (model.contains("end_of_word_suffix") && !model.at("end_of_word_suffix").is_null()) {
      unsupported("BPE end_of_word_suffix");
    }
  }

  void loadNormalizer(const json& n) {
    if (n.is_null()) return;
    const auto type = n.value("type", "");
    if (type == "Sequence") {
      for (const auto& child : n.at("normalizers")) loadNormalizer(child);
    } else if (type == "Prepend") {
      normalizers.push_back({"", n.at("prepend").get<std::string>()});
    } else if (type == "Replace" && n.at("pattern").contains("String")) {
      normalizers.push_back({n.at("pattern").at("String").get<std::string>(), n.at("content").get<std::string>()});
    } else {
      unsupported(fmt::format("normalizer {}", n.dump()));
    }
  }

  void loadPostProcessor(const json& p) {
    if (p.is_null()) return;
    if (p.value("type", "") != "TemplateProcessing") unsupported(fmt::format("post_processor '{}'", p.value("type", "?")));
    bool seenSequence = false;
    for (const auto& piece : p.at("single")) {
      if (piece.contains("Sequence")) {
        seenSequence = true;
      } else {
        const auto name = piece.at("SpecialToken").at("id").get<std::string>();
        for (const auto& id : p.at("special_tokens").at(name).at("ids")) {
          (seenSequence ? suffixIds : prefixIds).push_back(id.get<std::int32_t>());
        }
      }
    }
  }

  void loadDecoder(const json& d) {
    if (d.is_null()) return;
    const auto type = d.value("type", "");
    if (type == "Sequence") {
      for (const auto& child : d.at("decoders")) loadDecoder(child);
    } else if (type == "Replace" || type == "ByteFallback" || type == "Fuse" || type == "Strip") {
      decoders.push_back(d);
    } else {
      unsupported(fmt::format("decoder '{}'", type));
    }
  }

  std::string normalize(std::string text) const {
    for (const auto& rule : normalizers) {
      text = rule.pattern.empty() ? (text.empty() ? text : rule.content + text) : replaceAll(text, rule.pattern, rule.content);
    }
    return text;
  }

  // One normalized segment (no pre-tokenizer: the whole segment is one word) through BPE.
  void encodeSegment(const std::string& text, std::vector<std::int32_t>& out) const {
    std::vector<std::int32_t> symbols;
    bool lastWasUnk = false;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t len = std::min(utf8Length(static_cast<unsigned char>(text[pos])), text.size() - pos);
      const std::string ch = text.substr(pos, len);
      pos += len;
      if (const auto it = vocab.find(ch); it != vocab.end()) {
        symbols.push_back(it->second);
        lastWasUnk = false;
        continue;
      }
      if (byteFallback) {
        bool allBytes = true;
        std::vector<std::int32_t> bytes;
        for (unsigned char b : ch) {
          const auto it = vocab.find(fmt::format("<0x{:02X}>", b));
          if (it == vocab.end()) {
            allBytes = false;
            break;
          }
          bytes.push_back(it->second);
        }
        if (allBytes) {
          symbols.insert(symbols.end(), bytes.begin(), bytes.end());
          lastWasUnk = false;
          continue;
        }
      }
      if (unkId < 0) RP_THROW(InputError, "{}: character '{}' is not in the vocabulary and there is no unk_token", source, ch);
      if (!(fuseUnk && lastWasUnk)) symbols.push_back(unkId);
      lastWasUnk = true;
    }
    const auto merged = applyMerges(std::move(symbols), merges);
    out.insert(out.end(), merged.begin(), merged.end());
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::fromFile(const std::string& path) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  std::ifstream in(file);
  if (!in) RP_THROW(InputError, "{}: cannot open (expected a Hugging Face tokenizer.json)", file.string());
  auto impl = std::make_unique<Impl>();
  impl->source = file.string();
  try {
    const json j = json::parse(in);
    impl->loadModel(j.at("model"));
    if (j.contains("pre_tokenizer") && !j.at("pre_tokenizer").is_null()) {
      impl->unsupported(fmt::format("pre_tokenizer '{}'", j.at("pre_tokenizer").value("type", "?")));
    }
    impl->loadNormalizer(j.value("normalizer", json()));
    impl->loadPostProcessor(j.value("post_processor", json()));
    impl->loadDecoder(j.value("decoder", json()));
    for (const auto& token : j.value("added_tokens", json::array())) {
      const AddedToken added{token.at("content").get<std::string>(), token.at("id").get<std::int32_t>(),
                             token.value("special", false)};
      impl->added.push_back(added);
      if (added.special) impl->specialIds.insert(added.id);
    }
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: malformed tokenizer.json: {}", file.string(), e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> ids;
  if (addSpecialTokens) ids = m.prefixIds;
  // Split out added tokens (leftmost, then longest match), encode the text between them.
  std::size_t pos = 0, segmentStart = 0;
  auto flush = [&](std::size_t end) {
    if (end > segmentStart) m.encodeSegment(m.normalize(std::string(text.substr(segmentStart, end - segmentStart))), ids);
  };
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const auto& token : m.added) {
      if (!token.content.empty() && text.substr(pos, token.content.size()) == token.content &&
          (match == nullptr || token.content.size() > match->content.size())) {
        match = &token;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    flush(pos);
    ids.push_back(match->id);
    pos += match->content.size();
    segmentStart = pos;
  }
  flush(text.size());
  if (addSpecialTokens) ids.insert(ids.end(), m.suffixIds.begin(), m.suffixIds.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids, bool skipSpecialTokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  for (const auto id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= m.pieces.size()) {
      RP_THROW(InputError, "{}: cannot decode id {} (vocabulary has {} tokens)", m.source, id, m.pieces.size());
    }
    if (skipSpecialTokens && m.specialIds.count(id)) continue;
    tokens.push_back(m.pieces[static_cast<std::size_t>(id)]);
  }
  for (const auto& step : m.decoders) {
    const auto type = step.at("type").get<std::string>();
    if (type == "Replace") {
      const auto from = step.at("pattern").at("String").get<std::string>();
      const auto to = step.at("content").get<std::string>();
      for (auto& t : tokens) t = replaceAll(t, from, to);
    } else if (type == "ByteFallback") {
      tokens = fuseByteTokens(tokens);
    } else if (type == "Fuse") {
      std::string all;
      for (const auto& t : tokens) all += t;
      tokens = {all};
    } else if (type == "Strip") {
      const auto content = step.at("content").get<std::string>();
      const auto start = step.value("start", 0), stop = step.value("stop", 0);
      for (auto& t : tokens) {
        for (int i = 0; i < start && t.rfind(content, 0) == 0; ++i) t.erase(0, content.size());
        for (int i = 0; i < stop && t.size() >= content.size() &&
                        t.compare(t.size() - content.size(), content.size(), content) == 0; ++i) {
          t.erase(t.size() - content.size());
        }
      }
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::int32_t Tokenizer::vocabSize() const { return static_cast<std::int32_t>(impl_->pieces.size()); }

std::int32_t Tokenizer::tokenId(const std::string& token) const {
  const auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

}  // namespace rp::data
