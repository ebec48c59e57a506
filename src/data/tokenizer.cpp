#include "data/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_input.h"
#include "common/log.h"
#include "data/bpe.h"
#include "data/normalizer.h"
#include "data/pretokenizer.h"
#include "data/tokenizer_class.h"
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

struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special;
  bool normalized;      // matched in normalized text, as its normalized form
  bool lstrip, rstrip;  // the match takes the whitespace before / after it
  bool singleWord;      // matched only where no word character touches it
  std::string match;    // the text it is matched as: content, or normalize(content)
};

struct AddedMatch {
  std::size_t begin, end;   // [begin, end): the token, with any whitespace it strips
  const AddedToken* token;  // nullptr: no match (begin = end = text.size())
};

// The next added token in `text` at or after `from`, as HF's AddedVocabulary finds it: leftmost, then longest;
// a single_word token touching a word character is passed over; lstrip takes the whitespace before it (not before
// `from`), rstrip the whitespace after it.
AddedMatch findAdded(std::string_view text, std::size_t from, const std::vector<const AddedToken*>& tokens) {
  for (std::size_t pos = from; pos < text.size();) {
    const AddedToken* best = nullptr;
    for (const AddedToken* token : tokens) {
      if (!token->match.empty() && text.substr(pos, token->match.size()) == token->match &&
          (best == nullptr || token->match.size() > best->match.size())) {
        best = token;
      }
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    std::size_t begin = pos, end = pos + best->match.size();
    if (best->singleWord &&
        (unicode::endsWithWordCharacter(text.substr(0, begin)) || unicode::startsWithWordCharacter(text.substr(end)))) {
      pos = end;
      continue;
    }
    if (best->lstrip) begin = std::max(from, begin - unicode::trailingWhiteSpace(text.substr(0, begin)));
    if (best->rstrip) end += unicode::leadingWhiteSpace(text.substr(end));
    return {begin, end, best};
  }
  return {text.size(), text.size(), nullptr};
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
  Normalizer normalizer;
  std::optional<PreTokenizer> preTokenizer;
  std::vector<AddedToken> added;
  std::vector<const AddedToken*> rawAdded, normalizedAdded;  // matched before / after normalization
  std::unordered_set<std::int32_t> specialIds;
  std::vector<std::int32_t> prefixIds, suffixIds;  // post-processor, single sequence
  std::vector<json> decoders;

  // Word -> its tokens (ids and their lengths in bytes) cache (words repeat a lot); bounded, cleared when full.
  // Guarded for concurrent encode().
  struct WordTokens {
    std::vector<std::int32_t> ids;
    std::vector<std::uint32_t> lengths;
  };
  static constexpr std::size_t kCacheLimit = 1 << 18;
  mutable std::shared_mutex cacheMutex;
  mutable std::unordered_map<std::string, WordTokens> cache;
  mutable std::atomic<bool> warnedDropped{false};

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

  // One pre-tokenized word through the BPE model, via the cache; each token's span is that of the bytes it covers.
  void encodeWord(const AlignedText& word, Encoding& out) const {
    const WordTokens* tokens = nullptr;
    WordTokens computed;
    std::shared_lock<std::shared_mutex> lock(cacheMutex);
    if (const auto it = cache.find(word.text); it != cache.end()) {
      tokens = &it->second;
    } else {
      lock.unlock();
      bpeWord(word.text, computed);
      tokens = &computed;
    }
    out.ids.insert(out.ids.end(), tokens->ids.begin(), tokens->ids.end());
    if (word.tracked) {
      std::size_t pos = 0;
      for (const std::uint32_t length : tokens->lengths) {
        out.spans.push_back(word.cover(pos, length));
        pos += length;
      }
    }
    if (tokens == &computed) {
      std::unique_lock<std::shared_mutex> write(cacheMutex);
      if (cache.size() >= kCacheLimit) cache.clear();
      cache.emplace(word.text, std::move(computed));
    }
  }

  void bpeWord(const std::string& word, WordTokens& out) const {
    if (ignoreMerges) {
      if (const auto it = vocab.find(word); it != vocab.end()) {
        out.ids.push_back(it->second);
        out.lengths.push_back(static_cast<std::uint32_t>(word.size()));
        return;
      }
    }
    std::vector<std::int32_t> symbols;
    std::vector<std::uint32_t> lengths;
    std::uint32_t dropped = 0;  // bytes dropped before the first symbol: the first one covers them
    bool lastWasUnk = false;
    for (std::size_t pos = 0; pos < word.size();) {
      const std::size_t len =
          std::min(unicode::sequenceLength(static_cast<unsigned char>(word[pos])), word.size() - pos);
      const std::string ch = word.substr(pos, len);
      pos += len;
      if (const auto it = vocab.find(ch); it != vocab.end()) {
        symbols.push_back(it->second);
        lengths.push_back(static_cast<std::uint32_t>(len));
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
          lengths.insert(lengths.end(), bytes.size(), 1);
          lastWasUnk = false;
          continue;
        }
      }
      if (unkId < 0) {  // HF's BPE drops it; its bytes go with a neighbouring token, so later spans stay put
        if (lengths.empty()) {
          dropped += static_cast<std::uint32_t>(len);
        } else {
          lengths.back() += static_cast<std::uint32_t>(len);
        }
        if (!warnedDropped.exchange(true)) {
          RP_LOG_WARN(
              "{}: character '{}' is in neither the vocabulary nor its byte tokens, and there is no unk_token: "
              "dropped, as transformers drops it (later ones are dropped without a word)",
              source, ch);
        }
        lastWasUnk = false;
        continue;
      }
      if (fuseUnk && lastWasUnk) {
        lengths.back() += static_cast<std::uint32_t>(len);
      } else {
        symbols.push_back(unkId);
        lengths.push_back(static_cast<std::uint32_t>(len));
      }
      lastWasUnk = true;
    }
    if (!lengths.empty()) lengths.front() += dropped;
    out.ids = applyMerges(std::move(symbols), merges, &lengths);
    out.lengths = std::move(lengths);
  }

  // Normalized text between added tokens: pre-tokenized into words, each through BPE. `startsInput`: the
  // text begins the whole input.
  void encodeNormalized(AlignedText normalized, bool startsInput, Encoding& out) const {
    if (normalized.empty()) return;
    if (!preTokenizer) {
      encodeWord(normalized, out);  // no pre-tokenizer: the whole piece is one word
      return;
    }
    for (const auto& word : preTokenizer->split(std::move(normalized), startsInput)) encodeWord(word, out);
  }

  // Input bytes [begin, end) between non-normalized added tokens: normalized, then split on normalized added tokens.
  void encodeSegment(std::string_view input, std::size_t begin, std::size_t end, bool spans, Encoding& out) const {
    AlignedText normalized = normalizer.apply(
        AlignedText::identity(input.substr(begin, end - begin), static_cast<std::uint32_t>(begin), spans));
    const bool startsInput = begin == 0;
    if (normalizedAdded.empty()) {
      encodeNormalized(std::move(normalized), startsInput, out);
      return;
    }
    std::size_t start = 0;
    while (true) {
      const AddedMatch m = findAdded(normalized.text, start, normalizedAdded);
      encodeNormalized(normalized.slice(start, m.begin - start), startsInput && start == 0, out);
      if (m.token == nullptr) break;
      out.ids.push_back(m.token->id);
      if (spans) out.spans.push_back(normalized.cover(m.begin, m.end - m.begin));
      start = m.end;
    }
  }

  // Splits out non-normalized added tokens (leftmost, then longest match) and encodes the text between them; keeps
  // each token's span when `spans`.
  Encoding encode(std::string_view text, bool spans) const {
    if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
      RP_THROW(InputError, "{}: cannot encode a text of {} bytes in one piece (at most 4 GiB)", source, text.size());
    }
    Encoding out;
    std::size_t start = 0;
    while (true) {
      const AddedMatch added = findAdded(text, start, rawAdded);
      if (added.begin > start) encodeSegment(text, start, added.begin, spans, out);
      if (added.token == nullptr) break;
      out.ids.push_back(added.token->id);
      if (spans) out.spans.push_back({static_cast<std::uint32_t>(added.begin), static_cast<std::uint32_t>(added.end)});
      start = added.end;
    }
    return out;
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

Tokenizer Tokenizer::fromFile(const std::string& path, Pipeline pipeline) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  std::ifstream in(file);
  if (!in) RP_THROW(InputError, "{}: cannot open (expected a Hugging Face tokenizer.json)", file.string());
  auto impl = std::make_unique<Impl>();
  impl->source = file.string();
  const std::filesystem::path configPath = file.parent_path() / "tokenizer_config.json";
  try {
    json j = json::parse(in);
    if (std::ifstream config(configPath); config && pipeline == Pipeline::kTransformers) {
      const json c = readJson(configPath.string(), [&] { return json::parse(config); });
      if (const std::string name = c.is_object() ? applyTokenizerClass(j, c) : ""; !name.empty()) {
        RP_LOG_INFO("tokenizer {}: the pipeline transformers' {} builds (named in {}; docs/tokenizer.md)", impl->source,
                    name, configPath.string());
      }
    }
    impl->loadModel(j.at("model"));
    if (j.contains("pre_tokenizer") && !j.at("pre_tokenizer").is_null()) {
      impl->preTokenizer.emplace(j.at("pre_tokenizer"), impl->source);
    }
    impl->normalizer = Normalizer(j.value("normalizer", json()), impl->source);
    impl->loadPostProcessor(j.value("post_processor", json()));
    impl->loadDecoder(j.value("decoder", json()));
    for (const auto& token : j.value("added_tokens", json::array())) {
      AddedToken added{
          token.at("content").get<std::string>(), impl->tokenId(token.at("id"), token.at("content").get<std::string>()),
          token.value("special", false),          token.value("normalized", false),
          token.value("lstrip", false),           token.value("rstrip", false),
          token.value("single_word", false),      ""};
      // As Hugging Face does: a "normalized" added token is matched, and decoded, as its normalized form;
      // decoding skips special tokens by their content, so a normalized special token is never skipped.
      added.match = added.normalized ? impl->normalizer.apply(std::string_view(added.content)) : added.content;
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

Encoding Tokenizer::encodeWithSpans(std::string_view text) const {
  return impl_->encode(text, true);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> ids;
  if (addSpecialTokens) ids = m.prefixIds;
  const Encoding encoded = m.encode(text, false);
  ids.insert(ids.end(), encoded.ids.begin(), encoded.ids.end());
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
