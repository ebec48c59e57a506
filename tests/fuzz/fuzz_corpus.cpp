// A pre-tokenized directory (data/corpus.h): meta.json, tokens.bin, docs.bin and the optional mask.bin.
// Input: their contents as parts in that order (a fourth part is mask.bin).
#include <filesystem>

#include "data/corpus.h"
#include "fuzz_target.h"

namespace rp::fuzz {

namespace {
const char* const kFiles[] = {"meta.json", "tokens.bin", "docs.bin", "mask.bin"};
}

void fuzzOne(std::string_view data) {
  const auto parts = split(data);
  std::filesystem::create_directories(scratchDir() + "/corpus");
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string name = std::string("corpus/") + kFiles[i];
    if (i < parts.size()) {
      writeScratch(name, parts[i]);
    } else {
      std::filesystem::remove(scratchDir() + "/" + name);
    }
  }
  (void)data::loadCorpus(scratchDir() + "/corpus");
}

void writeSeeds(const std::string& dir) {
  for (const bool masked : {false, true}) {
    data::TokenizedCorpus corpus;
    corpus.add({1, 5, 9, 2}, masked ? std::vector<std::uint8_t>{0, 0, 1, 1} : std::vector<std::uint8_t>{});
    corpus.add({1, 7, 2}, masked ? std::vector<std::uint8_t>{0, 1, 1} : std::vector<std::uint8_t>{});
    const std::string at = scratchDir() + "/seed-corpus";
    std::filesystem::remove_all(at);
    data::saveCorpus(corpus, at, "tokenizer.json", 16);
    std::vector<std::string> parts;
    for (const char* file : kFiles) {
      if (std::filesystem::exists(at + "/" + file)) parts.push_back(readFile(at + "/" + file));
    }
    writeSeed(dir, masked ? "masked" : "plain", join(parts));
  }
}

}  // namespace rp::fuzz
