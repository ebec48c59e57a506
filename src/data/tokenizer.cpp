#include "data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/bpe.h"
#include "data/pretokenizer.h"
#include "data/unicode.h"

namespace rp::data {
namespace {

using nlohmann::json;

std::string replaceAll(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
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

bool isByteToken(const std::string& t) {
  return t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>';
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
    if (unicode::isValidUtf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (std::size_t k = 0; k < count; ++k) out.push_back("\xEF\xBF\xBD");
    }
  }
  return out;
}

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc } kind;
  std::string a, b;  // Prepend: a = text; Replace: a -> b
};

struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special;
  bool normalized;    // matched in normalized text, as its normalized form
  std::string match;  // the text it is matched as: content, or normalize(content)
};

// Leftmost-longest match of any token in `tokens` at or after `from`; returns {position, token}.
std::pair<std::size_t, const AddedToken*> findAdded(std::string_view text, std::size_t from,
                                                    const std::vector<const AddedToken*>& tokens) {
  for (std::size_t pos = from; pos < text.size(); ++pos) {
    const AddedToken* best = nullptr;
    for (const AddedToken* token : tokens) {
      if (!token->match.empty() && text.substr(pos, token->match.size()) == token->match &&
          (best == nullptr || token->match.size() > best->match.size())) {
        best = token;
      }
    }
    if (best != nullptr) return {pos, best};
  }
  return {text.size(), nullptr};
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
  bool ignoreMerges = false;
  std::vector<NormalizerStep> normalizers;
  std::optional<PreTokenizer> preTokenizer;
  std::vector<AddedToken> added;
  std::vector<const AddedToken*> rawAdded, normalizedAdded;  // matched before / after normalization
  std::unordered_set<std::int32_t> specialIds;
  std::vector<std::int32_t> prefixIds, suffixIds;  // post-processor, single sequence
  std::vector<json> decoders;

  // Word -> ids cache (words repeat a lot); bounded, cleared when full. Guarded for concurrent encode().
  static constexpr std::size_t kCacheLimit = 1 << 18;
  mutable std::shared_mutex cacheMutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;

  [[noreturn]] void unsupported(const std::string& what) const {
    RP_THROW(InputError, "{}: {} is not supported (docs/tokenizer.md lists what is)", source, what);
  }

  // A token id as the file gives it: an integer in [0, kMaxTokenId) (the largest published vocabularies have
  // ~260k ids; a larger one is a damaged file, not a tokenizer).
  std::int32_t tokenId(const json& id, const std::string& token) const {
    constexpr std::int64_t kMaxTokenId = 1 << 24;
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxTokenId) {
      RP_THROW(InputError, "{}: token '{}' has id {}: expected an integer in [0, {})", source, token, id.dump(),
               kMaxTokenId);
    }
    return static_cast<std::int32_t>(id.get<std::int64_t>());
  }

  void loadModel(const json& model) {
    if (model.value("type", "") != "BPE") unsupported(fmt::format("model type '{}'", model.value("type", "?")));
    for (const auto& [token, id] : model.at("vocab").items()) {
      const auto i = tokenId(id, token);
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
      merges.emplace(std::pair{l->second, r->second}, MergeRule{rank++, m->second});
    }
    if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
      const auto unk = model.at("unk_token").get<std::string>();
      unkId = vocab.count(unk) ? vocab.at(unk) : -1;
    }
    byteFallback = model.value("byte_fallback", false);
    fuseUnk = model.value("fuse_unk", false);
    ignoreMerges = model.value("ignore_merges", false);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && model.at(key).is_string() && !model.at(key).get<std::string>().empty()) {
        unsupported(fmt::format("BPE {}", key));
      }
    }
  }

  void loadNormalizer(const json& n) {
    if (n.is_null()) return;
    const auto type = n.value("type", "");
    if (type == "Sequence") {
      for (const auto& child : n.at("normalizers")) loadNormalizer(child);
    } else if (type == "Prepend") {
      normalizers.push_back({NormalizerStep::Kind::kPrepend, n.at("prepend").get<std::string>(), ""});
    } else if (type == "Replace" && n.at("pattern").contains("String")) {
      normalizers.push_back({NormalizerStep::Kind::kReplace, n.at("pattern").at("String").get<std::string>(),
                             n.at("content").get<std::string>()});
    } else if (type == "NFC") {
      normalizers.push_back({NormalizerStep::Kind::kNfc, "", ""});
    } else {
      unsupported(fmt::format("normalizer {}", n.dump()));
    }
  }

  void loadPostProcessor(const json& p) {
    if (p.is_null()) return;
    const auto type = p.value("type", "");
    if (type == "Sequence") {
      for (const auto& child : p.at("processors")) loadPostProcessor(child);
    } else if (type == "ByteLevel") {
      // offsets only: ids are unchanged
    } else if (type == "TemplateProcessing") {
      bool seenSequence = false;
      for (const auto& piece : p.at("single")) {
        if (piece.contains("Sequence")) {
          seenSequence = true;
          continue;
        }
        const auto name = piece.at("SpecialToken").at("id").get<std::string>();
        for (const auto& id : p.at("special_tokens").at(name).at("ids")) {
          (seenSequence ? suffixIds : prefixIds).push_back(tokenId(id, name));
        }
      }
    } else {
      unsupported(fmt::format("post_processor '{}'", type));
    }
  }

  void loadDecoder(const json& d) {
    if (d.is_null()) return;
    const auto type = d.value("type", "");
    if (type == "Sequence") {
      for (const auto& child : d.at("decoders")) loadDecoder(child);
    } else if (type == "Replace" || type == "ByteFallback" || type == "Fuse" || type == "Strip" ||
               type == "ByteLevel") {
      decoders.push_back(d);
    } else if (type == "Metaspace") {
      parseMetaspacePrepend(d, source);  // checked now rather than at the first decode
      decoders.push_back(d);
    } else {
      unsupported(fmt::format("decoder '{}'", type));
    }
  }

  std::string normalize(std::string_view input) const {
    std::string text(input);
    for (const auto& step : normalizers) {
      switch (step.kind) {
        case NormalizerStep::Kind::kPrepend:
          if (!text.empty()) text = step.a + text;
          break;
        case NormalizerStep::Kind::kReplace:
          text = replaceAll(text, step.a, step.b);
          break;
        case NormalizerStep::Kind::kNfc:
          text = unicode::nfc(text);
          break;
      }
    }
    return text;
  }

  // One pre-tokenized word through the BPE model, via the cache.
  void encodeWord(const std::string& word, std::vector<std::int32_t>& out) const {
    {
      std::shared_lock<std::shared_mutex> lock(cacheMutex);
      if (const auto it = cache.find(word); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> ids;
    bpeWord(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    std::unique_lock<std::shared_mutex> lock(cacheMutex);
    if (cache.size() >= kCacheLimit) cache.clear();
    cache.emplace(word, std::move(ids));
  }

  void bpeWord(const std::string& word, std::vector<std::int32_t>& out) const {
    if (ignoreMerges) {
      if (const auto it = vocab.find(word); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<std::int32_t> symbols;
    bool lastWasUnk = false;
    for (std::size_t pos = 0; pos < word.size();) {
      const std::size_t len =
          std::min(unicode::sequenceLength(static_cast<unsigned char>(word[pos])), word.size() - pos);
      const std::string ch = word.substr(pos, len);
      pos += len;
      if (const auto it = vocab.find(ch); it != vocab.end()) {
        symbols.push_back(it->second);
        lastWasUnk = false;
        continue;
      }
      if (byteFallback) {
        std::vector<std::int32_t> bytes;
        for (unsigned char b : ch) {
          const auto it = vocab.find(fmt::format("<0x{:02X}>", b));
          if (it == vocab.end()) break;
          bytes.push_back(it->second);
        }
        if (bytes.size() == ch.size()) {
          symbols.insert(symbols.end(), bytes.begin(), bytes.end());
          lastWasUnk = false;
          continue;
        }
      }
      if (unkId < 0) {
        RP_THROW(InputError, "{}: character '{}' is not in the vocabulary and there is no unk_token", source, ch);
      }
      if (!(fuseUnk && lastWasUnk)) symbols.push_back(unkId);
      lastWasUnk = true;
    }
    const auto merged = applyMerges(std::move(symbols), merges);
    out.insert(out.end(), merged.begin(), merged.end());
  }

  // Normalized text between added tokens: pre-tokenized into words, each through BPE. `startsInput`: the
  // text begins the whole input.
  void encodeNormalized(std::string_view normalized, bool startsInput, std::vector<std::int32_t>& out) const {
    if (normalized.empty()) return;
    if (!preTokenizer) {
      encodeWord(std::string(normalized), out);  // no pre-tokenizer: the whole piece is one word
      return;
    }
    for (const auto& word : preTokenizer->split(normalized, startsInput)) encodeWord(word, out);
  }

  // Raw text between non-normalized added tokens: normalized, then split on normalized added tokens.
  void encodeSegment(std::string_view text, bool startsInput, std::vector<std::int32_t>& out) const {
    const std::string normalized = normalize(text);
    std::size_t start = 0;
    while (true) {
      const auto [pos, token] = findAdded(normalized, start, normalizedAdded);
      encodeNormalized(std::string_view(normalized).substr(start, pos - start), startsInput && start == 0, out);
      if (token == nullptr) break;
      out.push_back(token->id);
      start = pos + token->match.size();
    }
  }

  std::string decode(std::vector<std::string> tokens) const {
    for (const auto& step : decoders) {
      const auto type = step.at("type").get<std::string>();
      if (type == "Replace") {
        const auto from = step.at("pattern").at("String").get<std::string>();
        const auto to = step.at("content").get<std::string>();
        for (auto& t : tokens) t = replaceAll(t, from, to);
      } else if (type == "ByteFallback") {
        tokens = fuseByteTokens(tokens);
      } else if (type == "ByteLevel") {
        std::string bytes;
        for (const auto& t : tokens) bytes += byteLevelDecode(t);
        tokens = {unicode::lossyUtf8(bytes)};
      } else if (type == "Metaspace") {
        // Each replacement becomes a space, except in the first token (unless the scheme never prepends).
        const std::string replacement = step.value("replacement", std::string("\u2581"));
        const bool dropFirst = parseMetaspacePrepend(step, source) != MetaspacePrepend::kNever;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replaceAll(tokens[i], replacement, i == 0 && dropFirst ? "" : " ");
        }
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
                          t.compare(t.size() - content.size(), content.size(), content) == 0;
               ++i) {
            t.erase(t.size() - content.size());
          }
        }
      }
    }
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
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
      impl->preTokenizer.emplace(j.at("pre_tokenizer"), impl->source);
    }
    impl->loadNormalizer(j.value("normalizer", json()));
    impl->loadPostProcessor(j.value("post_processor", json()));
    impl->loadDecoder(j.value("decoder", json()));
    for (const auto& token : j.value("added_tokens", json::array())) {
      AddedToken added{token.at("content").get<std::string>(),
                       impl->tokenId(token.at("id"), token.at("content").get<std::string>()),
                       token.value("special", false), token.value("normalized", false), ""};
      // As Hugging Face does: a "normalized" added token is matched, and decoded, as its normalized form;
      // decoding skips special tokens by their content, so a normalized special token is never skipped.
      added.match = added.normalized ? impl->normalize(added.content) : added.content;
      if (added.id >= static_cast<std::int32_t>(impl->pieces.size())) impl->pieces.resize(added.id + 1);
      impl->pieces[static_cast<std::size_t>(added.id)] = added.match;
      impl->vocab.emplace(added.content, added.id);
      if (added.special && added.match == added.content) impl->specialIds.insert(added.id);
      impl->added.push_back(std::move(added));
    }
    for (const auto& added : impl->added) (added.normalized ? impl->normalizedAdded : impl->rawAdded).push_back(&added);
  } catch (const json::exception& e) {
    RP_THROW(InputError, "{}: malformed tokenizer.json: {}", file.string(), e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> ids;
  if (addSpecialTokens) ids = m.prefixIds;
  // Split out non-normalized added tokens (leftmost, then longest match); encode the text between them.
  std::size_t start = 0;
  while (true) {
    const auto [pos, token] = findAdded(text, start, m.rawAdded);
    if (pos > start) m.encodeSegment(text.substr(start, pos - start), start == 0, ids);
    if (token == nullptr) break;
    ids.push_back(token->id);
    start = pos + token->match.size();
  }
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
  return m.decode(std::move(tokens));
}

const std::string& Tokenizer::path() const {
  return impl_->source;
}

std::vector<std::string> Tokenizer::specialTokens() const {
  std::vector<std::string> out;
  for (const auto& added : impl_->added) {
    if (added.special) out.push_back(added.content);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

std::int32_t Tokenizer::vocabSize() const {
  return static_cast<std::int32_t>(impl_->pieces.size());
}

std::int32_t Tokenizer::tokenId(const std::string& token) const {
  const auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

}  // namespace rp::data
