// roundpipe_tokenize: writes the pre-tokenized dataset format (docs/data.md) from text/jsonl/alpaca/sharegpt
// files, with the same rules roundpipe_train applies when it tokenizes on the fly.
#include "cli/command_line.h"
#include "cli/run_main.h"
#include "common/log.h"
#include "data/dataset.h"
#include "model/config.h"

namespace {

int run(int argc, char** argv) {
  rp::cli::CommandLine line{
      "roundpipe_tokenize: tokenize a dataset once for roundpipe_train (data.format = \"tokenized\")"};
  rp::data::DatasetOptions options;
  std::string modelDir, output;
  line.option("--model", modelDir, "Hugging Face model directory (tokenizer.json and config.json)").required();
  line.option("--output", output, "output directory").required();
  line.option("--format", options.format, "text | jsonl | alpaca | sharegpt")
      .oneOf({"text", "jsonl", "alpaca", "sharegpt"});
  line.option("--sample-by", options.sampleBy, "text: line | paragraph | document")
      .oneOf({"line", "paragraph", "document"});
  line.option("--template", options.chatTemplate, "alpaca/sharegpt: auto | model | chatml | llama3")
      .oneOf({"auto", "model", "chatml", "llama3"});
  line.flag("--skip-bad-records", options.skipBadRecords, "skip (and count) bad records instead of failing");
  line.option("inputs", options.paths, "dataset files").required();
  if (const auto code = line.parse(argc, argv)) return *code;
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
  rp::cli::exitProcess(rp::cli::runMain([&] { return run(argc, argv); }));
}
