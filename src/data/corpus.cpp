#include "data/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_input.h"
#include "common/mapped_file.h"

namespace rp::data {
namespace fs = std::filesystem;

void TokenizedCorpus::add(const std::vector<std::int32_t>& ids, const std::vector<std::uint8_t>& mask) {
  if (!mask.empty() || !trainMask.empty()) {
    if (trainMask.empty()) trainMask.assign(tokens.size(), 1);
    if (mask.empty()) {
      trainMask.insert(trainMask.end(), ids.size(), 1);
    } else {
      trainMask.insert(trainMask.end(), mask.begin(), mask.end());
    }
  }
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  docOffsets.push_back(tokens.size());
}

namespace {

template <typename T>
void writeArray(const fs::path& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: write failed ({} bytes)", path.string(), values.size() * sizeof(T));
}

template <typename T>
std::vector<T> readArray(const fs::path& path) {
  const MappedFile file(path.string());
  if (file.size() % sizeof(T) != 0) {
    RP_THROW(InputError, "{}: size {} is not a multiple of {} bytes (truncated?)", path.string(), file.size(),
             sizeof(T));
  }
  std::vector<T> out(file.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), file.data(), file.size());
  return out;
}

}  // namespace

void saveCorpus(const TokenizedCorpus& corpus, const std::string& directory, const std::string& tokenizerPath,
                std::int64_t vocabSize) {
  const fs::path dir(directory);
  fs::create_directories(dir);
  writeArray(dir / "tokens.bin", corpus.tokens);
  writeArray(dir / "docs.bin", corpus.docOffsets);
  if (!corpus.trainMask.empty()) writeArray(dir / "mask.bin", corpus.trainMask);
  const nlohmann::json meta{
      {"format", "roundpipe-tokenized"}, {"version", kCorpusFormatVersion},       {"documents", corpus.documentCount()},
      {"tokens", corpus.tokens.size()},  {"has_mask", !corpus.trainMask.empty()}, {"tokenizer", tokenizerPath},
      {"vocab_size", vocabSize}};
  std::ofstream(dir / "meta.json") << meta.dump(2) << '\n';
}

TokenizedCorpus loadCorpus(const std::string& directory) {
  const fs::path dir(directory);
  const fs::path metaPath = dir / "meta.json";
  std::ifstream in(metaPath);
  if (!in)
    RP_THROW(InputError, "{}: cannot open (expected a directory written by roundpipe_tokenize)", metaPath.string());
  struct Meta {
    std::uint64_t documents = 0, tokens = 0;
    bool hasMask = false;
    std::int64_t vocabSize = 0;
  };
  const Meta meta = readJson(metaPath.string(), [&] {
    const auto j = nlohmann::json::parse(in);
    if (j.value("format", "") != "roundpipe-tokenized" || j.value("version", 0) != kCorpusFormatVersion) {
      RP_THROW(InputError, "{}: expected format \"roundpipe-tokenized\" version {}, found {} version {}",
               metaPath.string(), kCorpusFormatVersion, j.value("format", "?"), j.value("version", 0));
    }
    return Meta{j.value("documents", std::uint64_t{0}), j.value("tokens", std::uint64_t{0}), j.value("has_mask", false),
                j.value("vocab_size", std::int64_t{0})};
  });
  TokenizedCorpus corpus;
  corpus.tokens = readArray<std::int32_t>(dir / "tokens.bin");
  corpus.docOffsets = readArray<std::uint64_t>(dir / "docs.bin");
  if (meta.hasMask) corpus.trainMask = readArray<std::uint8_t>(dir / "mask.bin");

  if (corpus.docOffsets.empty() || corpus.docOffsets.size() - 1 != meta.documents || corpus.docOffsets.front() != 0 ||
      corpus.docOffsets.back() != corpus.tokens.size() || meta.tokens != corpus.tokens.size()) {
    RP_THROW(InputError, "{}: docs.bin/tokens.bin disagree with meta.json ({} documents, {} tokens expected)",
             directory, meta.documents, meta.tokens);
  }
  for (std::size_t d = 1; d < corpus.docOffsets.size(); ++d) {
    if (corpus.docOffsets[d] < corpus.docOffsets[d - 1]) {
      RP_THROW(InputError, "{}/docs.bin: offsets decrease at document {}", directory, d);
    }
  }
  if (!corpus.trainMask.empty() && corpus.trainMask.size() != corpus.tokens.size()) {
    RP_THROW(InputError, "{}/mask.bin: {} flags for {} tokens", directory, corpus.trainMask.size(),
             corpus.tokens.size());
  }
  const auto vocab = meta.vocabSize;
  for (std::size_t i = 0; i < corpus.tokens.size(); ++i) {
    if (corpus.tokens[i] < 0 || corpus.tokens[i] >= vocab) {
      RP_THROW(InputError, "{}/tokens.bin: token {} at index {} is outside the vocabulary of {}", directory,
               corpus.tokens[i], i, vocab);
    }
  }
  return corpus;
}

std::pair<TokenizedCorpus, TokenizedCorpus> holdOut(const TokenizedCorpus& corpus, double fraction,
                                                    std::uint64_t seed) {
  const std::size_t n = corpus.documentCount();
  if (n < 2)
    RP_THROW(InputError, "holding out documents for evaluation needs at least 2 documents, the data has {}", n);
  const auto held =
      std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(fraction * static_cast<double>(n))), 1, n - 1);
  // Fisher-Yates with mt19937_64, as the packer shuffles: the same on every platform.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed ^ 0x5EEDE7A1u);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[static_cast<std::size_t>(rng() % i)]);
  std::vector<bool> isHeld(n, false);
  for (std::size_t i = 0; i < held; ++i) isHeld[order[i]] = true;
  std::pair<TokenizedCorpus, TokenizedCorpus> out;
  for (std::size_t d = 0; d < n; ++d) {
    const auto doc = corpus.document(d);
    std::vector<std::int32_t> ids(doc.begin(), doc.end());
    std::vector<std::uint8_t> mask;
    if (!corpus.trainMask.empty()) {
      mask.assign(corpus.trainMask.begin() + static_cast<std::ptrdiff_t>(corpus.docOffsets[d]),
                  corpus.trainMask.begin() + static_cast<std::ptrdiff_t>(corpus.docOffsets[d + 1]));
    }
    (isHeld[d] ? out.second : out.first).add(ids, mask);
  }
  return out;
}

}  // namespace rp::data
