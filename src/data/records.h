// Reading dataset files into samples: text, JSONL with "text", alpaca and sharegpt (rendered with a chat
// template into trainable / non-trainable segments). docs/data.md describes the formats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat_template.h"

namespace rp::data {

// How the user spells the dataset options, for messages: run-config keys (roundpipe_train) or command-line
// flags (roundpipe_tokenize).
struct OptionNames {
  std::string format = "data.format";
  std::string chatTemplate = "data.template";
  std::string path = "data.path";
  std::string skipBadRecords = "data.on_bad_record = \"skip\"";
};

struct ReadOptions {
  std::string format = "text";         // text | jsonl | alpaca | sharegpt
  std::string sampleBy = "paragraph";  // text: line | paragraph | document
  ChatTemplate chatTemplate;           // built-in ChatML unless set
  bool skipBadRecords = false;
  OptionNames names;
};

struct ReadResult {
  std::vector<Sample> samples;
  std::int64_t skipped = 0;     // bad records skipped (skipBadRecords)
  std::string firstSkipReason;  // what the first skipped record had wrong
};

// Throws InputError "<file>:<line>: ..." for a bad record unless skipBadRecords.
ReadResult readSamples(const std::vector<std::string>& paths, const ReadOptions& options);

}  // namespace rp::data
