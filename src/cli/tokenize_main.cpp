// roundpipe_tokenize: writes the pre-tokenized dataset format (docs/data.md) from text/jsonl/alpaca/sharegpt
// files, with the same rules roundpipe_train applies when it tokenizes on the fly.
#include <CLI/CLI.hpp>

#include "cli/run_main.h"
#include "common/log.h"
#include "data/dataset.h"
#include "model/config.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"roundpipe_tokenize: tokenize a dataset once for roundpipe_train (data.format = \"tokenized\")"};
  rp::data::DatasetOptions options;
  std::string modelDir, output;
  app.add_option("--model", modelDir, "Hugging Face model directory (tokenizer.json and config.json)")->required();
  app.add_option("--output", output, "output directory")->required();
  app.add_option("--format", options.format, "text | jsonl | alpaca | sharegpt")
      ->check(CLI::IsMember({"text", "jsonl", "alpaca", "sharegpt"}));
  app.add_option("--sample-by", options.sampleBy, "text: line | paragraph | document")
      ->check(CLI::IsMember({"line", "paragraph", "document"}));
  app.add_option("--template", options.chatTemplate, "alpaca/sharegpt: auto | model | chatml | llama3")
      ->check(CLI::IsMember({"auto", "chatml", "llama3"}));
  app.add_flag("--skip-bad-records", options.skipBadRecords, "skip (and count) bad records instead of failing");
  app.add_option("inputs", options.paths, "dataset files")->required();
  if (const auto code = rp::cli::parseCommandLine(app, argc, argv)) return *code;
  options.names = {"--format", "--template", "the input files", "--skip-bad-records"};
  const auto config = rp::model::loadModelConfig(modelDir);
  options.bosId = static_cast<std::int32_t>(config.bosTokenId);
  options.eosId = static_cast<std::int32_t>(config.eosTokenId);
  const auto tokenizer = rp::data::Tokenizer::fromFile(modelDir);
  const auto corpus = rp::data::loadDataset(options, tokenizer);
  rp::data::saveCorpus(corpus, output, modelDir + "/tokenizer.json", tokenizer.vocabSize());
  RP_LOG_INFO("wrote {}: {} documents, {} tokens", output, corpus.documentCount(), corpus.tokens.size());
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return rp::cli::runMain([&] { return run(argc, argv); });
}
