// Dataset records (data/records.h): plain text by line/paragraph/document, JSONL text, alpaca and sharegpt /
// OpenAI messages. The input's first byte picks the format and the chat template, the rest is the file.
#include <array>

#include "data/records.h"
#include "fuzz_target.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  if (data.empty()) return;
  static constexpr std::array<const char*, 6> kFormats{"text", "text", "text", "jsonl", "alpaca", "sharegpt"};
  static constexpr std::array<const char*, 3> kSampleBy{"line", "paragraph", "document"};
  const auto pick = static_cast<unsigned char>(data[0]);
  data::ReadOptions options;
  options.format = kFormats[pick % kFormats.size()];
  options.sampleBy = kSampleBy[pick % kSampleBy.size()];
  options.chatTemplate =
      data::ChatTemplate::builtIn(pick & 0x40 ? data::ChatTemplate::Kind::kLlama3 : data::ChatTemplate::Kind::kChatML);
  options.skipBadRecords = (pick & 0x80) != 0;
  (void)data::readSamples({writeScratch("data.jsonl", data.substr(1))}, options);
}

void writeSeeds(const std::string& dir) {
  if (const auto fixtures = fixturesDir(); !fixtures.empty()) {
    writeSeed(dir, "text", "\x00" + readFile(fixtures + "/text/tinystories_sample.txt").substr(0, 3000));
  }
  writeSeed(dir, "jsonl", "\x03{\"text\":\"one\"}\n{\"text\":\"two\\nlines\"}\n");
  writeSeed(dir, "alpaca",
            "\x04{\"instruction\":\"Add\",\"input\":\"2+2\",\"output\":\"4\"}\n"
            "{\"instruction\":\"Say hi\",\"output\":\"hi\"}\n");
  writeSeed(
      dir, "sharegpt",
      "\x05{\"conversations\":[{\"from\":\"system\",\"value\":\"Be brief\"},{\"from\":\"human\",\"value\":\"hi\"},"
      "{\"from\":\"gpt\",\"value\":\"hello\"}]}\n");
  writeSeed(dir, "messages",
            "\x45{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
            "{\"role\":\"assistant\",\"content\":\"hello\"}]}\n");
}

}  // namespace rp::fuzz
