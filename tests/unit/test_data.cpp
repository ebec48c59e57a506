// Dataset reading, chat rendering, the corpus format and the packer: the rules docs/data.md states.
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/chat_template.h"
#include "data/corpus.h"
#include "data/jinja.h"
#include "data/packer.h"
#include "data/records.h"
#include "data/tokenizer.h"
#include "support/fixtures.h"

namespace rp::data {
namespace {

std::string writeFile(const std::string& name, const std::string& text) {
  const std::string path = test::scratchDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Records, TextSplitsByParagraphLineOrDocument) {
  const auto path = writeFile("t.txt", "a b\nc\n\n\nd\n  \ne\n");
  ReadOptions o;
  o.sampleBy = "paragraph";
  auto r = readSamples({path}, o);
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_EQ(r.samples[0].segments[0].text, "a b\nc");
  EXPECT_EQ(r.samples[2].segments[0].text, "e");
  o.sampleBy = "line";
  EXPECT_EQ(readSamples({path}, o).samples.size(), 5u);  // "  " is a line too
  o.sampleBy = "document";
  EXPECT_EQ(readSamples({path}, o).samples.size(), 1u);
}

TEST(Records, JsonlBadRecordNamesFileAndLine) {
  const auto path = writeFile("d.jsonl", "{\"text\": \"ok\"}\n\n{\"txt\": 1}\nnot json\n");
  ReadOptions o;
  o.format = "jsonl";
  const auto error = errorOf([&] { readSamples({path}, o); });
  EXPECT_NE(error.find(path + ":line 3: bad jsonl record: missing string field 'text'"), std::string::npos) << error;
  o.skipBadRecords = true;
  const auto r = readSamples({path}, o);
  EXPECT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.skipped, 2);
  EXPECT_NE(r.firstSkipReason.find("line 3"), std::string::npos);
}

// A truncated JSONL line (a download cut short, an editor's unclosed brace) is a JSON parse error at its line and
// column, not "not a JSON object".
TEST(Records, ATruncatedJsonlLineIsAParseErrorAtItsLineAndColumn) {
  const auto path = writeFile("cut.jsonl",
                              "{\"text\": \"hi\", \"instruction\": \"Say hi\", \"output\": \"hi\"}\n"
                              "{\"instruction\": \"Say hi\", \"outp\n");
  ReadOptions o;
  o.format = "alpaca";
  const auto error = errorOf([&] { readSamples({path}, o); });
  // Line 2 is 31 bytes and its string never closes: parsing stops at its end, column 32.
  EXPECT_NE(error.find(path + ":line 2, column 32: bad alpaca record: not valid JSON: "), std::string::npos) << error;
  EXPECT_EQ(error.find("not a JSON object"), std::string::npos) << error;
  o.format = "jsonl";
  EXPECT_NE(errorOf([&] { readSamples({path}, o); }).find(":line 2, column 32: bad jsonl record: not valid JSON"),
            std::string::npos);
}

TEST(Records, AlpacaRendersChatMLWithResponseTrainable) {
  const auto path = writeFile("a.json", R"([{"instruction": "Add", "input": "1+1", "output": "2"}])");
  ReadOptions o;
  o.format = "alpaca";
  const auto r = readSamples({path}, o);
  ASSERT_EQ(r.samples.size(), 1u);
  const auto& s = r.samples[0].segments;
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].text, "<|im_start|>user\nAdd\n\n1+1<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(s[0].trainable);
  EXPECT_EQ(s[1].text, "2<|im_end|>");
  EXPECT_TRUE(s[1].trainable);
  EXPECT_EQ(s[2].text, "\n");
  EXPECT_FALSE(s[2].trainable);
}

TEST(Records, ShareGptLlama3AndRoleErrors) {
  const auto path = writeFile(
      "s.jsonl",
      R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]})"
      "\n"
      R"({"conversations": [{"from": "robot", "value": "?"}]})"
      "\n");
  ReadOptions o;
  o.format = "sharegpt";
  o.chatTemplate = ChatTemplate::builtIn(ChatTemplate::Kind::kLlama3);
  const auto error = errorOf([&] { readSamples({path}, o); });
  EXPECT_NE(error.find(":line 2: bad sharegpt record: turn 'from' is \"robot\""), std::string::npos) << error;
  o.skipBadRecords = true;
  const auto r = readSamples({path}, o);
  ASSERT_EQ(r.samples.size(), 1u);
  const auto& s = r.samples[0].segments;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(s[1].text, "A<|eot_id|>");
  EXPECT_TRUE(s[1].trainable);
}

// The OpenAI chat form ("messages": role/content) reads as the same conversation as ShareGPT's.
TEST(Records, OpenAiMessagesReadAsShareGpt) {
  const auto path = writeFile(
      "m.jsonl",
      R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]})"
      "\n"
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})"
      "\n"
      R"({"messages": [{"role": "tool", "content": "x"}]})"
      "\n"
      R"({"messages": []})"
      "\n");
  ReadOptions o;
  o.format = "sharegpt";
  o.skipBadRecords = true;
  const auto r = readSamples({path}, o);
  ASSERT_EQ(r.samples.size(), 2u);
  ASSERT_EQ(r.samples[0].segments.size(), r.samples[1].segments.size());
  for (std::size_t i = 0; i < r.samples[0].segments.size(); ++i) {
    EXPECT_EQ(r.samples[1].segments[i].text, r.samples[0].segments[i].text);
    EXPECT_EQ(r.samples[1].segments[i].trainable, r.samples[0].segments[i].trainable);
  }
  EXPECT_EQ(r.skipped, 2);
  EXPECT_NE(r.firstSkipReason.find("line 3: turn 'role' is \"tool\": expected system, human/user or gpt/assistant"),
            std::string::npos)
      << r.firstSkipReason;
  o.skipBadRecords = false;
  const auto empty = writeFile("e.jsonl", R"({"messages": []})");
  EXPECT_NE(errorOf([&] {
              readSamples({empty}, o);
            }).find("missing non-empty array 'conversations' (ShareGPT) or 'messages' (OpenAI)"),
            std::string::npos);
}

// data.eval_fraction: a seeded choice of whole documents, disjoint from the rest and together all of them.
TEST(Corpus, HoldOutSplitsWholeDocumentsBySeed) {
  TokenizedCorpus c;
  for (std::int32_t d = 0; d < 40; ++d) c.add({d, d, d}, {1, 0, 1});
  const auto [train, held] = holdOut(c, 0.1, 7);
  EXPECT_EQ(held.documentCount(), 4u);
  EXPECT_EQ(train.documentCount(), 36u);
  std::set<std::int32_t> seen;
  for (const auto* part : {&train, &held}) {
    for (std::size_t d = 0; d < part->documentCount(); ++d) {
      const auto doc = part->document(d);
      ASSERT_EQ(doc.size(), 3u);
      EXPECT_TRUE(seen.insert(doc[0]).second) << "document " << doc[0] << " in both parts";
    }
    EXPECT_EQ(part->trainMask.size(), part->tokens.size()) << "the loss masks travel with their documents";
  }
  EXPECT_EQ(seen.size(), 40u);
  const auto again = holdOut(c, 0.1, 7).second;
  const auto other = holdOut(c, 0.1, 8).second;
  EXPECT_EQ(again.tokens, held.tokens) << "the same seed holds out the same documents";
  EXPECT_NE(other.tokens, held.tokens) << "another seed, other documents";
  EXPECT_EQ(holdOut(c, 0.001, 1).second.documentCount(), 1u) << "at least one";
  TokenizedCorpus one;
  one.add({1, 2}, {});
  EXPECT_NE(errorOf([&] { holdOut(one, 0.1, 1); }).find("needs at least 2 documents, the data has 1"),
            std::string::npos);
}

TokenizedCorpus smallCorpus() {
  TokenizedCorpus c;
  c.add({1, 2, 3, 4, 5}, {});
  c.add({10, 11}, {});
  c.add({20, 21, 22, 23, 24, 25, 26}, {});
  return c;
}

TEST(Packer, RowsFollowTheSegmentAndTargetRules) {
  const auto corpus = smallCorpus();
  Packer packer(corpus, 4, /*seed=*/3);
  std::vector<std::int32_t> all;
  for (int r = 0; r < 4; ++r) {  // 16 slots = the 14 tokens + 2 of the next epoch
    const PackedRow row = packer.next();
    ASSERT_EQ(row.inputIds.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      all.push_back(row.inputIds[i]);
      // a position restarts exactly where the segment changes
      if (i > 0) {
        EXPECT_EQ(row.positions[i] == 0, row.segments[i] != row.segments[i - 1]) << "row " << r;
      }
      // targets are the next token of the same document, or none at a document's end
      const auto id = row.inputIds[i];
      const bool last = id == 5 || id == 11 || id == 26;
      EXPECT_EQ(row.targets[i], last ? kNoTarget : id + 1) << "row " << r << " slot " << i;
    }
    EXPECT_EQ(row.positions[0], 0);
  }
  // Every token of the epoch appears once, documents contiguous.
  std::multiset<std::int32_t> firstEpoch(all.begin(), all.begin() + 14);
  EXPECT_EQ(firstEpoch, (std::multiset<std::int32_t>{1, 2, 3, 4, 5, 10, 11, 20, 21, 22, 23, 24, 25, 26}));
  EXPECT_EQ(packer.cursor().epoch, 1);
}

TEST(Packer, SameSeedSameStreamAndCursorResumesExactly) {
  const auto corpus = smallCorpus();
  Packer a(corpus, 3, 9), b(corpus, 3, 9);
  a.next(5);
  const DataCursor saved = a.cursor();
  const auto expected = a.next(7);
  Packer resumed(corpus, 3, 9, saved);
  const auto got = resumed.next(7);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(got[i].inputIds, expected[i].inputIds) << i;
    EXPECT_EQ(got[i].targets, expected[i].targets) << i;
    EXPECT_EQ(got[i].positions, expected[i].positions) << i;
  }
  EXPECT_EQ(resumed.cursor(), a.cursor());
  EXPECT_EQ(b.next(5)[4].inputIds, Packer(corpus, 3, 9).next(5)[4].inputIds);
}

TEST(Packer, SeedsShuffleDifferentlyAcrossSeedsAndEpochs) {
  TokenizedCorpus c;
  for (int d = 0; d < 50; ++d) c.add({d}, {});
  auto firstTokens = [&](std::uint64_t seed, int skipEpochs) {
    Packer p(c, 1, seed);
    p.next(50 * skipEpochs);
    std::vector<std::int32_t> out;
    for (auto& row : p.next(50)) out.push_back(row.inputIds[0]);
    return out;
  };
  EXPECT_NE(firstTokens(1, 0), firstTokens(2, 0));
  EXPECT_NE(firstTokens(1, 0), firstTokens(1, 1));
  auto sorted = firstTokens(1, 1);
  std::sort(sorted.begin(), sorted.end());
  for (int d = 0; d < 50; ++d) EXPECT_EQ(sorted[static_cast<std::size_t>(d)], d);
}

TEST(Packer, MaskedTokensAreNotTargets) {
  TokenizedCorpus c;
  c.add({1, 2, 3, 4}, {0, 0, 1, 1});  // prompt 1 2, response 3 4
  Packer p(c, 4, 0);
  const auto row = p.next();
  EXPECT_EQ(row.targets, (std::vector<std::int32_t>{kNoTarget, 3, 4, kNoTarget}));
  EXPECT_EQ(row.targetCount(), 2);
}

TEST(Packer, ShardsSplitStepRowsEvenly) {
  const auto corpus = smallCorpus();
  Packer p(corpus, 2, 0);
  const auto rows = p.next(6);
  const auto r1 = shardRows(rows, 1, 3);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].inputIds, rows[2].inputIds);
  EXPECT_EQ(r1[1].inputIds, rows[3].inputIds);
  EXPECT_NE(errorOf([&] { shardRows(rows, 0, 4); }).find("6 rows per step do not divide evenly over 4"),
            std::string::npos);
}

TEST(Corpus, SaveLoadRoundTripAndCorruption) {
  TokenizedCorpus c;
  c.add({1, 2, 3}, {0, 1, 1});
  c.add({4}, {});
  const std::string dir = test::scratchDir() + "/tok";
  saveCorpus(c, dir, "tok.json", 10);
  const auto back = loadCorpus(dir);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.docOffsets, c.docOffsets);
  EXPECT_EQ(back.trainMask, (std::vector<std::uint8_t>{0, 1, 1, 1}));

  std::filesystem::resize_file(dir + "/tokens.bin", 10);
  EXPECT_NE(errorOf([&] { loadCorpus(dir); }).find("tokens.bin: size 10 is not a multiple of 4"), std::string::npos);
  saveCorpus(c, dir, "tok.json", 3);  // token 4 and 3 exceed a vocabulary of 3
  EXPECT_NE(errorOf([&] { loadCorpus(dir); }).find("outside the vocabulary of 3"), std::string::npos);
  EXPECT_NE(errorOf([&] { loadCorpus(dir + "/nope"); }).find("meta.json: cannot open"), std::string::npos);
}

// Found by fuzzing (tests/fuzz/regressions/corpus): a meta.json field of another type ended in std::terminate, and
// "documents": 2^64 - 1 with an empty docs.bin read past the end of the offsets.
TEST(Corpus, AMalformedMetaFileIsAClearError) {
  TokenizedCorpus c;
  c.add({1, 2}, {});
  const std::string dir = test::scratchDir() + "/meta";
  saveCorpus(c, dir, "tok.json", 10);
  auto meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  meta["tokens"] = "two";
  std::ofstream(dir + "/meta.json", std::ios::trunc) << meta.dump();
  auto e = errorOf([&] { loadCorpus(dir); });
  EXPECT_NE(e.find(dir + "/meta.json: malformed"), std::string::npos) << e;
  meta["tokens"] = 0;
  meta["documents"] = std::numeric_limits<std::uint64_t>::max();
  std::ofstream(dir + "/meta.json", std::ios::trunc) << meta.dump();
  std::ofstream(dir + "/docs.bin", std::ios::trunc);
  std::ofstream(dir + "/tokens.bin", std::ios::trunc);
  e = errorOf([&] { loadCorpus(dir); });
  EXPECT_NE(e.find("docs.bin/tokens.bin disagree with meta.json"), std::string::npos) << e;
}

// Found by fuzzing (tests/fuzz/regressions/tokenizer): a vocabulary id of 7.8e39 was converted to int (undefined
// behaviour); a negative or huge id resized the piece table by it. Every id is checked to be an integer in range.
TEST(Tokenizer, AnIdThatIsNotATokenIdIsAClearError) {
  const std::string path = test::scratchDir() + "/tokenizer.json";
  auto withVocabId = [&](const std::string& id, const std::string& addedId) {
    std::ofstream(path, std::ios::trunc) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": )" << id
                                         << R"(}, "merges": []}, "added_tokens": [{"id": )" << addedId
                                         << R"(, "content": "<s>", "special": true}]})";
  };
  for (const std::string bad : {"7.77778e+39", "-3", "\"1\"", "16777216", "1.5"}) {
    withVocabId(bad, "2");
    auto e = errorOf([&] { Tokenizer::fromFile(path); });
    EXPECT_NE(e.find(path + ": token 'b' has id "), std::string::npos) << bad << ": " << e;
    withVocabId("1", bad);
    e = errorOf([&] { Tokenizer::fromFile(path); });
    EXPECT_NE(e.find(path + ": token '<s>' has id"), std::string::npos) << bad << ": " << e;
  }
  withVocabId("1", "2");
  EXPECT_EQ(Tokenizer::fromFile(path).vocabSize(), 3);
}

// Added tokens take the whitespace they ask for (Phi-3's chat tokens and </s> have rstrip), a single_word one matches
// only where no word character touches it, and every token names the bytes of the input it covers.
TEST(Tokenizer, AddedTokensStripWhitespaceAndTokensNameTheirSpans) {
  const std::string path = test::scratchDir() + "/tokenizer.json";
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, " ": 2, "<": 3, "w": 4, ">": 5},
      "merges": []}, "added_tokens": [
      {"id": 6, "content": "<r>", "rstrip": true, "special": true},
      {"id": 7, "content": "<l>", "lstrip": true, "special": true},
      {"id": 8, "content": "<w>", "single_word": true, "special": true}]})";
  const Tokenizer tokenizer = Tokenizer::fromFile(path);
  auto check = [&](const std::string& text, const std::vector<std::int32_t>& ids, const std::vector<Span>& spans) {
    const Encoding e = tokenizer.encodeWithSpans(text);
    EXPECT_EQ(e.ids, ids) << text;
    EXPECT_EQ(e.spans, spans) << text;
    EXPECT_EQ(tokenizer.encode(text, false), ids) << text;
  };
  check("a<r>  b", {0, 6, 1}, {{0, 1}, {1, 6}, {6, 7}});
  check("a  <l>b", {0, 7, 1}, {{0, 1}, {1, 6}, {6, 7}});
  check("<r> <l>b", {6, 7, 1}, {{0, 4}, {4, 7}, {7, 8}});  // lstrip takes no whitespace rstrip took
  check("a<w> <w>", {0, 3, 4, 5, 2, 8}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 8}});
  // A character with neither a token nor byte tokens, and no unk_token, is dropped as HF drops it; its bytes go to
  // the token before it (the one after, at a word's start), so the tokens after it keep their own spans.
  check("a\u2603b", {0, 1}, {{0, 4}, {4, 5}});
  check("\u2603b", {1}, {{0, 4}});
}

// The chat-template subset names what it does not support, with the line (transformers' own rendering is the
// golden tier's: tests/golden/test_golden_chat_template.cpp).
TEST(ChatTemplate, AnUnsupportedConstructIsNamedWithItsLine) {
  auto error = [](const std::string& source) {
    try {
      jinja::Template t(source, "t.jinja");
      (void)t.render(nlohmann::json{{"x", "a"}});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("hi\n{% filter upper %}x{% endfilter %}")
                .find("chat template t.jinja: line 2: '{% filter %}' is not supported"),
            std::string::npos);
  EXPECT_NE(error("{{ x | wordwrap }}").find("line 1: filter 'wordwrap' is not supported"), std::string::npos);
  EXPECT_NE(error("{{ x.missing.deeper }}").find("'deeper' of an undefined value"), std::string::npos);
  EXPECT_NE(error("{% if x %}open").find("{% if %} is never closed"), std::string::npos);
  EXPECT_NE(error("{{ x ").find("'{{' is never closed"), std::string::npos);
  EXPECT_NE(error("{{ raise_exception('no system role') }}")
                .find("line 1: the template refused the conversation: no system role"),
            std::string::npos);
  // The refusal names the line that raised it (Gemma's "System role not supported" said "line 0").
  EXPECT_NE(error("a\n\n{% if x %}{{ raise_exception('no') }}{% endif %}").find("line 3: the template refused"),
            std::string::npos);
  EXPECT_NE(error("{% macro f(a) %}{% endmacro %}\n{{ f(1, 2) }}").find("line 2: macro 'f' takes 1 arguments, got 2"),
            std::string::npos);
  EXPECT_NE(error("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}").find("macro 'f' has no parameter 'b'"),
            std::string::npos);
  EXPECT_NE(error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("macro calls nested deeper than 64"),
            std::string::npos);  // not a stack overflow
  // Found by fuzzing (tests/fuzz/regressions/chat_template): an integer literal out of range escaped as
  // std::out_of_range. And a template that loops without end, or builds without bound, fails rather than hangs.
  EXPECT_NE(error("{% set d = {'a': 1} %}{% set d.a = 2 %}").find("'d' is not a namespace"), std::string::npos);
  EXPECT_NE(error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").find("nested deeper than 64"),
            std::string::npos);
  std::string blocks;
  for (int k = 0; k < 100; ++k) blocks += "{% if x %}";
  EXPECT_NE(error(blocks).find("blocks nested deeper than 64"), std::string::npos);
  EXPECT_NE(error("{{ 4000000000 * 4000000000 * 4 }}").find("overflows 64-bit integers"), std::string::npos);
  EXPECT_NE(error("{{ 99999999999999999999 }}").find("integer literal 99999999999999999999 is out of range"),
            std::string::npos);
  std::string loops = "{% set l = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0] %}";
  for (int k = 0; k < 6; ++k) loops += "{% for a in l %}";
  for (int k = 0; k < 6; ++k) loops += "{% endfor %}";
  EXPECT_NE(error(loops).find("the template loops more than 100000 times"), std::string::npos);
  EXPECT_NE(error("{% set s = 'ab' %}{% for a in [0] * 3 %}{% endfor %}").find("'*' of a list and a int"),
            std::string::npos);
}

// What Mistral's templates use: "}}" and "%}" inside string literals do not end a tag (Mistral Nemo's did not load),
// macros with defaults and named arguments, select/reject and selectattr/rejectattr with and without a test.
TEST(ChatTemplate, StringsHoldingTagEndsMacrosAndSelectFilters) {
  auto render = [](const std::string& source) {
    return jinja::Template(source, "t.jinja")
        .render(nlohmann::json{{"messages",
                                {{{"role", "user"}, {"content", "u1"}},
                                 {{"role", "assistant"}, {"content", "a1"}},
                                 {{"role", "user"}, {"content", ""}}}}})
        .text;
  };
  EXPECT_EQ(render(R"({{ "a}}b" }}|{{ 'c%}d' }}|{% set x = "%}" %}{{ x }}|{{ "q\"}}" }})"), "a}}b|c%}d|%}|q\"}}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} | tojson }}|{% set d = {'k': [1, {'v': 2}]} %}{{ d.k[1].v }}"),
            "{\"a\": {\"b\": 1}}|2");  // "}}" closing dicts, not the tag
  EXPECT_EQ(render("{%- macro wrap(text, left='[', right=']') -%}{{ left }}{{ text }}{{ right }}{%- endmacro -%}"
                   "{{ wrap('x') }}{{ wrap('y', '<') }}{{ wrap('z', right='>') }}{{ wrap(text='w', left='(') }}"),
            "[x]<y][z>(w]");
  EXPECT_EQ(render("{% for m in messages | selectattr('role', 'equalto', 'user') %}{{ m.content }},{% endfor %}"
                   "{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}"
                   "{{ messages | selectattr('content') | list | length }}"
                   "{{ [0, 1, 2, 3] | select('odd') | list }}{{ [0, 1, ''] | reject | list }}"),
            "u1,,12[1, 3][0, '']");
}

// Replies inside {% generation %} are exactly the trainable text, plus the special token after them; a template
// that refuses a conversation, or renders a reply where it cannot be found, makes a bad record.
TEST(ChatTemplate, TheModelsTemplateMasksTheReplies) {
  const std::string dir = test::scratchDir() + "/model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
      "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content | upper }}{% endgeneration %}{{ eos_token }}{% else %}[{{ m.content }}]{% endif %}{% endfor %}"}]})";
  const auto t = loadModelChatTemplate(dir + "/tokenizer.json", {"</s>"});
  ASSERT_TRUE(t);
  const Sample s = renderChat({{"user", "hi"}, {"assistant", "hello"}, {"user", "bye"}, {"assistant", "ciao"}}, *t);
  std::string trained, all;
  for (const auto& segment : s.segments) {
    if (segment.trainable) trained += segment.text + "|";
    all += segment.text;
  }
  EXPECT_EQ(all, "<s>[hi]HELLO</s>[bye]CIAO</s>");
  EXPECT_EQ(trained, "HELLO</s>|CIAO</s>|");

  // Without generation markers a reply the template rewrites cannot be found; chat_template.jinja wins over the
  // tokenizer_config.json entry.
  std::ofstream(dir + "/chat_template.jinja") << "{% for m in messages %}{% if m.role == 'system' %}"
                                                 "{{ raise_exception('System role not supported') }}{% endif %}"
                                                 "<{{ m.role }}>{{ m.content | upper }}{% endfor %}";
  const auto jinjaFile = loadModelChatTemplate(dir + "/tokenizer.json", {});
  ASSERT_TRUE(jinjaFile);
  EXPECT_EQ(jinjaFile->model->name(), dir + "/chat_template.jinja");
  try {
    renderChat({{"user", "hi"}, {"assistant", "hello"}}, *jinjaFile);
    ADD_FAILURE() << "a rewritten reply was masked";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("assistant turn 2 does not appear"), std::string::npos) << e.what();
  }
  try {
    renderChat({{"system", "s"}, {"user", "hi"}, {"assistant", "HELLO"}}, *jinjaFile);
    ADD_FAILURE() << "the refusal was ignored";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(loadModelChatTemplate(test::scratchDir() + "/none/tokenizer.json", {}));
}

}  // namespace
}  // namespace rp::data
