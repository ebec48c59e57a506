#include "data/records.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::data {
namespace {

using nlohmann::json;

// `key`: the option that named the file, for errors.
std::string readFile(const std::string& path, const std::string& key) {
  if (std::filesystem::is_directory(path)) {
    RP_THROW(InputError, "{} = \"{}\" is a directory: it takes dataset files (a list of them for several)", key, path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) RP_THROW(InputError, "{} = \"{}\": cannot open the dataset file: {}", key, path, std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Sample plain(std::string text) {
  return Sample{{Segment{std::move(text), true}}, false};
}

void splitText(const std::string& text, const std::string& sampleBy, std::vector<Sample>& out) {
  if (sampleBy == "document") {
    if (!text.empty()) out.push_back(plain(text));
    return;
  }
  std::istringstream lines(text);
  std::string line, paragraph;
  auto flush = [&] {
    if (!paragraph.empty()) out.push_back(plain(paragraph));
    paragraph.clear();
  };
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (sampleBy == "line") {
      if (!line.empty()) out.push_back(plain(line));
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
    } else {
      if (!paragraph.empty()) paragraph += '\n';
      paragraph += line;
    }
  }
  flush();
}

const std::string& stringField(const json& record, const char* field) {
  const auto it = record.find(field);
  if (it == record.end()) throw std::invalid_argument(fmt::format("missing string field '{}'", field));
  if (!it->is_string()) {
    const std::string kind = it->is_null()                       ? "null"
                             : it->is_array() || it->is_object() ? fmt::format("an {}", it->type_name())
                                                                 : fmt::format("a {}", it->type_name());
    throw std::invalid_argument(fmt::format("field '{}' is {}, expected a string", field, kind));
  }
  return it->get_ref<const std::string&>();
}

Sample fromAlpaca(const json& r, const ChatTemplate& t) {
  std::string user = stringField(r, "instruction");
  if (r.contains("input") && r.at("input").is_string() && !r.at("input").get<std::string>().empty()) {
    user += "\n\n" + r.at("input").get<std::string>();
  }
  std::vector<Message> messages;
  if (r.contains("system") && r.at("system").is_string())
    messages.push_back({"system", r.at("system").get<std::string>()});
  messages.push_back({"user", user});
  messages.push_back({"assistant", stringField(r, "output")});
  return renderChat(messages, t);
}

// ShareGPT ("conversations": [{"from", "value"}]) or the OpenAI chat form ("messages": [{"role", "content"}]);
// either key of a turn pair is accepted in either list.
Sample fromShareGpt(const json& r, const ChatTemplate& t) {
  auto it = r.find("conversations");
  if (it == r.end()) it = r.find("messages");
  if (it == r.end() || !it->is_array() || it->empty())
    throw std::invalid_argument("missing non-empty array 'conversations' (ShareGPT) or 'messages' (OpenAI)");
  std::vector<Message> messages;
  bool anyAssistant = false;
  for (const auto& turn : *it) {
    if (!turn.is_object()) throw std::invalid_argument("a conversation turn is not an object");
    const bool openAi = !turn.contains("from") && turn.contains("role");
    const char* roleKey = openAi ? "role" : "from";
    const std::string from = stringField(turn, roleKey);
    std::string role;
    if (from == "system")
      role = "system";
    else if (from == "human" || from == "user")
      role = "user";
    else if (from == "gpt" || from == "assistant")
      role = "assistant";
    else
      throw std::invalid_argument(
          fmt::format("turn '{}' is \"{}\": expected system, human/user or gpt/assistant", roleKey, from));
    anyAssistant = anyAssistant || role == "assistant";
    messages.push_back({role, stringField(turn, openAi ? "content" : "value")});
  }
  if (!anyAssistant) throw std::invalid_argument("no assistant (gpt) turn: nothing to train on");
  return renderChat(messages, t);
}

// Records of a JSON file: one per line (JSONL), or the elements of a top-level array. `where` is
// "line N" or "record N" for messages. A JSONL line that does not parse comes as `parseError` (else empty), with
// `where` "line N, column C" at the byte where parsing stopped (a truncated line: its end).
template <typename Fn>
void forEachRecord(const std::string& path, const std::string& text, Fn&& fn) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    json array;
    try {
      array = json::parse(text);
    } catch (const json::exception& e) {
      RP_THROW(InputError, "{}: not valid JSON: {}", path, e.what());
    }
    for (std::size_t i = 0; i < array.size(); ++i) fn(array[i], fmt::format("record {}", i), std::string());
    return;
  }
  std::istringstream lines(text);
  std::string line;
  for (std::size_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at line 1, column C: <reason>": the reason.
      const std::string what = e.what();
      const auto colon = what.find(": ", what.find("column"));
      fn(json(), fmt::format("line {}, column {}", n, e.byte),
         "not valid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
      continue;
    }
    fn(record, fmt::format("line {}", n), std::string());
  }
}

}  // namespace

ReadResult readSamples(const std::vector<std::string>& paths, const ReadOptions& options) {
  ReadResult result;
  for (const auto& path : paths) {
    const std::string text = readFile(path, options.names.path);
    if (options.format == "text") {
      splitText(text, options.sampleBy, result.samples);
      continue;
    }
    forEachRecord(path, text, [&](const json& record, const std::string& where, const std::string& parseError) {
      try {
        if (!parseError.empty()) throw std::invalid_argument(parseError);
        if (!record.is_object()) throw std::invalid_argument("not a JSON object");
        if (options.format == "jsonl") {
          result.samples.push_back(plain(stringField(record, "text")));
        } else if (options.format == "alpaca") {
          result.samples.push_back(fromAlpaca(record, options.chatTemplate));
        } else if (options.format == "sharegpt") {
          result.samples.push_back(fromShareGpt(record, options.chatTemplate));
        } else {
          RP_THROW(InputError, "{} \"{}\" cannot be read as records", options.names.format, options.format);
        }
      } catch (const std::invalid_argument& e) {
        if (!options.skipBadRecords) {
          RP_THROW(InputError, "{}:{}: bad {} record: {} (to skip such records: {})", path, where, options.format,
                   e.what(), options.names.skipBadRecords);
        }
        if (result.skipped++ == 0) result.firstSkipReason = fmt::format("{}:{}: {}", path, where, e.what());
      }
    });
  }
  return result;
}

}  // namespace rp::data
