// Tokenizer throughput (MB of UTF-8 text per second, one thread) on tiny-shakespeare, line by line, for the
// byte-level Qwen3 tokenizer and the SentencePiece-style TinyStories one. Peer: benchmarks/peer_hf_tokenizer.py.
// Target (docs/benchmarks.md): >= 5 MB/s per core.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/env.h"
#include "data/tokenizer.h"

namespace {

std::string fixtures() {
  std::string dir = rp::env::get(rp::env::kFixturesDir);
  return dir.empty() ? std::string("../shared/fixtures") : dir;
}

std::vector<std::string> lines() {
  std::ifstream in(fixtures() + "/text/tinyshakespeare.txt");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line + "\n");
  return out;
}

void run(benchmark::State& state, const std::string& tokenizerPath) {
  if (!std::filesystem::exists(tokenizerPath)) {
    state.SkipWithError(("missing " + tokenizerPath + " (set RP_FIXTURES_DIR)").c_str());
    return;
  }
  const auto text = lines();
  std::size_t bytes = 0, tokens = 0;
  for (auto _ : state) {
    // A fresh tokenizer per pass: its word cache starts empty, as on a new corpus.
    state.PauseTiming();
    // As HF tokenizers reads the file, the peer it is compared with.
    const auto tokenizer = rp::data::Tokenizer::fromFile(tokenizerPath, rp::data::Tokenizer::Pipeline::kFile);
    state.ResumeTiming();
    for (const auto& line : text) {
      tokens += tokenizer.encode(line, false).size();
      bytes += line.size();
    }
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e6, benchmark::Counter::kIsRate);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void BM_EncodeQwen3(benchmark::State& state) {
  run(state, fixtures() + "/tokenizers/qwen3/tokenizer.json");
}
void BM_EncodeTinyStories(benchmark::State& state) {
  run(state, fixtures() + "/models/tinystories-656k/tokenizer.json");
}
BENCHMARK(BM_EncodeQwen3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeTinyStories)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
