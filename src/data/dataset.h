// From dataset files to a tokenized corpus: read records, render chat samples, tokenize, add BOS/EOS,
// build loss masks. The pre-tokenized format is loaded as it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/records.h"
#include "data/tokenizer.h"

namespace rp::data {

struct DatasetOptions {
  std::vector<std::string> paths;
  std::string format = "text";  // text | jsonl | alpaca | sharegpt | tokenized
  std::string sampleBy = "paragraph";
  std::string chatTemplate = "auto";  // auto | model | chatml | llama3
  bool addBos = true;
  bool addEos = true;
  bool skipBadRecords = false;
  std::int32_t bosId = -1;  // from the model config; -1 = none
  std::int32_t eosId = -1;
  OptionNames names;  // how messages name these options
};

// "auto" takes the model's own chat template (loadModelChatTemplate) where it has one, else ChatML when the
// vocabulary has <|im_start|>, Llama-3 headers when it has <|start_header_id|>; otherwise an InputError asks for
// the template option (`names.chatTemplate`). "model" requires the model's own.
ChatTemplate resolveChatTemplate(const std::string& name, const Tokenizer& tokenizer, const OptionNames& names = {});

// Tokenizes samples, each as one text (the ids transformers' apply_chat_template(tokenize=True) gives a chat
// sample); a token is a training target when it covers a byte of a trainable segment. Plain samples get BOS/EOS
// as configured, chat samples carry their own. Empty samples are dropped.
TokenizedCorpus tokenizeSamples(const std::vector<Sample>& samples, const Tokenizer& tokenizer,
                                const DatasetOptions& options);

// Throws InputError naming the files when they hold no sample (every record empty, or skipped).
TokenizedCorpus loadDataset(const DatasetOptions& options, const Tokenizer& tokenizer);

}  // namespace rp::data
