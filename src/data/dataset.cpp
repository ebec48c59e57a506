#include "data/dataset.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fmt.h"
#include "common/log.h"

namespace rp::data {

namespace {

// Chat data rendered by a built-in template on a tokenizer without its special tokens would train on each
// marker split into plain text: refused, naming those the tokenizer lacks. (Generation may render a built-in
// layout as text on any tokenizer, as transformers' apply_chat_template does.)
void requireTemplateTokens(const ChatTemplate& chatTemplate, const std::string& name, const Tokenizer& tokenizer,
                           const OptionNames& names) {
  if (chatTemplate.kind == ChatTemplate::Kind::kModel) return;  // the model's own, for its own tokenizer
  const std::vector<std::string> needed =
      chatTemplate.kind == ChatTemplate::Kind::kChatML
          ? std::vector<std::string>{"<|im_start|>", "<|im_end|>"}
          : std::vector<std::string>{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  const std::vector<std::string> special = tokenizer.specialTokens();
  std::vector<std::string> missing;
  for (const auto& token : needed) {
    if (std::find(special.begin(), special.end(), token) == special.end()) missing.push_back(token);
  }
  if (missing.empty()) return;
  RP_THROW(InputError,
           "{} \"{}\": the tokenizer {} has no special token {}: the chat data would be trained on the template's "
           "markers split into plain text; set {} to \"auto\" (the model's own template, or the built-in one its "
           "tokens fit) or use the model's own tokenizer",
           names.chatTemplate, name, tokenizer.path(), fmt::join(missing, ", "), names.chatTemplate);
}

}  // namespace

ChatTemplate resolveChatTemplate(const std::string& name, const Tokenizer& tokenizer, const OptionNames& names) {
  if (name == "chatml") return ChatTemplate::builtIn(ChatTemplate::Kind::kChatML);
  if (name == "llama3") return ChatTemplate::builtIn(ChatTemplate::Kind::kLlama3);
  if (name != "auto" && name != "model") {
    RP_THROW(InputError, "{} \"{}\": expected auto, model, chatml or llama3", names.chatTemplate, name);
  }
  if (auto model = loadModelChatTemplate(tokenizer.path(), tokenizer.specialTokens())) {
    RP_LOG_INFO("chat template: the model's own, from {}", model->model->name());
    return std::move(*model);
  }
  if (name == "model") {
    RP_THROW(InputError,
             "{} \"model\": no chat template beside {} (chat_template.jinja, or \"chat_template\" in "
             "tokenizer_config.json); set {} to chatml or llama3",
             names.chatTemplate, tokenizer.path(), names.chatTemplate);
  }
  if (tokenizer.tokenId("<|im_start|>") >= 0) return ChatTemplate::builtIn(ChatTemplate::Kind::kChatML);
  if (tokenizer.tokenId("<|start_header_id|>") >= 0) return ChatTemplate::builtIn(ChatTemplate::Kind::kLlama3);
  RP_THROW(InputError,
           "{} \"auto\": the model has no chat template of its own and the tokenizer has neither <|im_start|> "
           "(ChatML) nor <|start_header_id|> (Llama-3); set {} explicitly",
           names.chatTemplate, names.chatTemplate);
}

TokenizedCorpus tokenizeSamples(const std::vector<Sample>& samples, const Tokenizer& tokenizer,
                                const DatasetOptions& options) {
  TokenizedCorpus corpus;
  const bool masked = options.format == "alpaca" || options.format == "sharegpt";
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  std::string text;
  std::vector<Span> trained;  // the trainable segments' bytes in `text`, in order
  for (const auto& sample : samples) {
    ids.clear();
    mask.clear();
    text.clear();
    trained.clear();
    for (const auto& segment : sample.segments) {
      const auto begin = static_cast<std::uint32_t>(text.size());
      text += segment.text;
      if (segment.trainable) trained.push_back({begin, static_cast<std::uint32_t>(text.size())});
    }
    if (!sample.chat && options.addBos && options.bosId >= 0) {
      ids.push_back(options.bosId);
      mask.push_back(1);
    }
    // The whole sample at once, as apply_chat_template(tokenize=True) encodes it; a token is trained when it
    // covers any byte of a trainable segment (transformers' assistant mask marks the same tokens).
    const Encoding encoded = tokenizer.encodeWithSpans(text);
    std::size_t next = 0;
    for (std::size_t k = 0; k < encoded.ids.size(); ++k) {
      const Span span = encoded.spans[k];
      while (next < trained.size() && trained[next].end <= span.begin) ++next;
      ids.push_back(encoded.ids[k]);
      mask.push_back(next < trained.size() && trained[next].begin < span.end && span.begin < span.end ? 1 : 0);
    }
    if (!sample.chat && options.addEos && options.eosId >= 0) {
      ids.push_back(options.eosId);
      mask.push_back(1);
    }
    if (ids.empty()) continue;
    corpus.add(ids, masked ? mask : std::vector<std::uint8_t>{});
  }
  return corpus;
}

TokenizedCorpus loadDataset(const DatasetOptions& options, const Tokenizer& tokenizer) {
  if (options.format == "tokenized") {
    if (options.paths.size() != 1) {
      RP_THROW(InputError, "{} \"tokenized\" takes one directory in {}, got {}", options.names.format,
               options.names.path, options.paths.size());
    }
    TokenizedCorpus corpus = loadCorpus(options.paths[0]);
    for (const auto id : corpus.tokens) {
      if (id >= tokenizer.vocabSize()) {
        RP_THROW(InputError, "{}: token id {} is outside this model's tokenizer ({} ids): tokenized for another model?",
                 options.paths[0], id, tokenizer.vocabSize());
      }
    }
    return corpus;
  }
  ReadOptions read;
  read.format = options.format;
  read.sampleBy = options.sampleBy;
  read.skipBadRecords = options.skipBadRecords;
  read.names = options.names;
  if (options.format == "alpaca" || options.format == "sharegpt") {
    read.chatTemplate = resolveChatTemplate(options.chatTemplate, tokenizer, options.names);
    requireTemplateTokens(read.chatTemplate, options.chatTemplate, tokenizer, options.names);
  }
  const ReadResult result = readSamples(options.paths, read);
  if (result.skipped > 0) {
    RP_LOG_WARN("skipped {} bad record(s); first: {}", result.skipped, result.firstSkipReason);
  }
  TokenizedCorpus corpus = tokenizeSamples(result.samples, tokenizer, options);
  if (corpus.documentCount() == 0) {
    RP_THROW(InputError, "{}: no samples to train on ({} format): every {} was empty{}", fmt::join(options.paths, ", "),
             options.format, options.format == "text" ? "sample" : "record",
             result.skipped > 0
                 ? fmt::format(" or skipped ({} skipped; first: {})", result.skipped, result.firstSkipReason)
                 : "");
  }
  RP_LOG_INFO("dataset: {} samples, {} tokens from {} file(s)", corpus.documentCount(), corpus.tokens.size(),
              options.paths.size());
  return corpus;
}

}  // namespace rp::data
