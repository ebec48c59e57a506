#include "data/jinja.h"

#include <algorithm>
#include <ctime>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/jinja_internal.h"

namespace rp::data::jinja {

using namespace detail;

// ---- Statements -----------------------------------------------------------------------------------------

struct Node {
  virtual ~Node() = default;
  virtual void render(Context& ctx) const = 0;
  Where where;
};

namespace {

using Body = std::vector<std::unique_ptr<Node>>;

void renderBody(const Body& body, Context& ctx) {
  for (const auto& n : body) n->render(ctx);
}

struct Text : Node {
  std::string text;
  void render(Context& ctx) const override { ctx.out += text; }
};

struct Output : Node {
  ExprPtr value;
  void render(Context& ctx) const override {
    ctx.out += str(value->eval(ctx));
    if (ctx.out.size() > kMaxSize) fail(where, fmt::format("the template renders more than {} bytes", kMaxSize));
  }
};

struct If : Node {
  std::vector<std::pair<ExprPtr, Body>> branches;  // a null condition: else
  void render(Context& ctx) const override {
    for (const auto& [condition, body] : branches) {
      if (!condition || truthy(condition->eval(ctx))) {
        renderBody(body, ctx);
        return;
      }
    }
  }
};

struct For : Node {
  std::vector<std::string> targets;  // one name, or two to unpack pairs
  ExprPtr iterable;
  Body body, otherwise;
  void render(Context& ctx) const override {
    const Value seq = iterable->eval(ctx);
    List items;
    if (seq.kind == Value::Kind::kList) {
      items = *seq.list;
    } else if (seq.kind == Value::Kind::kDict) {
      for (const auto& [k, v] : *seq.dict) items.push_back(Value::string(k));
    } else if (seq.kind == Value::Kind::kString) {
      for (const char c : seq.s) items.push_back(Value::string(std::string(1, c)));
    } else if (seq.defined() && seq.kind != Value::Kind::kNone) {
      fail(where, fmt::format("cannot loop over a {}", kindName(seq.kind)));
    }
    if (items.empty()) {
      renderBody(otherwise, ctx);
      return;
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t k = 0; k < n; ++k) {
      ctx.step(where);
      ctx.push();
      const Value& x = items[static_cast<std::size_t>(k)];
      if (targets.size() == 1) {
        ctx.set(targets[0], x);
      } else {
        if (x.kind != Value::Kind::kList || x.list->size() != targets.size()) {
          fail(where, fmt::format("cannot unpack a {} into {} names", kindName(x.kind), targets.size()));
        }
        for (std::size_t t = 0; t < targets.size(); ++t) ctx.set(targets[t], (*x.list)[t]);
      }
      ctx.set("loop", Value::ofDict({{"index", Value::integer(k + 1)},
                                     {"index0", Value::integer(k)},
                                     {"revindex", Value::integer(n - k)},
                                     {"revindex0", Value::integer(n - k - 1)},
                                     {"first", Value::boolean(k == 0)},
                                     {"last", Value::boolean(k == n - 1)},
                                     {"length", Value::integer(n)},
                                     {"previtem", k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value()},
                                     {"nextitem", k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value()}}));
      renderBody(body, ctx);
      ctx.pop();
    }
  }
};

struct Set : Node {
  std::string name, attribute;  // `set name.attribute = ...` when attribute is not empty
  ExprPtr value;
  void render(Context& ctx) const override {
    Value v = value->eval(ctx);
    if (attribute.empty()) {
      ctx.set(name, std::move(v));
      return;
    }
    const Value target = ctx.lookup(name);
    if (target.kind != Value::Kind::kDict || !target.isNamespace) {
      fail(where, fmt::format("'{}' is not a namespace: only namespace() attributes can be set", name));
    }
    for (auto& [k, old] : *target.dict) {
      if (k == attribute) {
        old = std::move(v);
        return;
      }
    }
    target.dict->emplace_back(attribute, std::move(v));
  }
};

struct Generation : Node {
  Body body;
  void render(Context& ctx) const override {
    const std::size_t start = ctx.out.size();
    renderBody(body, ctx);
    ctx.generation.emplace_back(start, ctx.out.size());
  }
};

// A macro: calling it renders its body, with its parameters set, into a string (Jinja's caller-less macros).
// Names it does not set are looked up where it is called.
struct Macro : Node {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> parameters;  // a null default: undefined when not passed
  Body body;
  void render(Context& ctx) const override {
    Context* const context = &ctx;  // macros live only while this render runs
    ctx.set(
        name, Value::function([this, context](const std::vector<Value>& args, const Dict& named, const Where& at) {
          Context& c = *context;
          if (args.size() > parameters.size()) {
            fail(at, fmt::format("macro '{}' takes {} arguments, got {}", name, parameters.size(), args.size()));
          }
          for (const auto& entry : named) {  // no structured bindings: lambdas below capture the name
            const std::string& key = entry.first;
            const bool known =
                std::any_of(parameters.begin(), parameters.end(), [&](const auto& p) { return p.first == key; });
            if (!known) fail(at, fmt::format("macro '{}' has no parameter '{}'", name, key));
          }
          c.step(at);
          if (c.macroDepth >= Context::kMaxMacroDepth) {
            fail(at, fmt::format("macro calls nested deeper than {}", Context::kMaxMacroDepth));
          }
          struct Depth {
            int& depth;
            ~Depth() { --depth; }
          } depth{++c.macroDepth};
          c.push();
          for (std::size_t k = 0; k < parameters.size(); ++k) {
            const std::string& parameter = parameters[k].first;
            const ExprPtr& fallback = parameters[k].second;
            Value value;
            if (k < args.size()) {
              value = args[k];
            } else if (const auto it = std::find_if(named.begin(), named.end(),
                                                    [&](const auto& n) { return n.first == parameter; });
                       it != named.end()) {
              value = it->second;
            } else if (fallback) {
              value = fallback->eval(c);
            }
            c.set(parameter, std::move(value));
          }
          std::string outer = std::move(c.out);
          const std::size_t generations = c.generation.size();
          c.out.clear();
          renderBody(body, c);
          std::string rendered = std::move(c.out);
          c.out = std::move(outer);
          c.generation.resize(generations);  // {% generation %} marks inside a macro would not point into the output
          c.pop();
          return Value::string(std::move(rendered));
        }));
  }
};

// ---- Template lexing: text and tags, with transformers' whitespace settings ------------------------------

struct Tag {
  enum class Kind { kText, kOutput, kStatement } kind;
  std::string text;
  int line = 1;
};

// Where the tag opened at `open` closes: the first "}}" / "%}" outside a string literal and outside brackets ("#}" for
// a comment, whose text is not Jinja), as Jinja's lexer reads a tag; npos when it never does.
std::size_t tagEnd(const std::string& src, std::size_t open, char kind) {
  if (kind == '#') return src.find("#}", open + 2);
  const char closing = kind == '{' ? '}' : '%';
  char quote = 0;
  int depth = 0;  // brackets open: "}}" inside {'a': {'b': 1}} closes dicts, not the tag
  for (std::size_t i = open + 2; i < src.size(); ++i) {
    const char c = src[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (depth == 0 && c == closing && i + 1 < src.size() && src[i + 1] == '}') {
      return i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

std::vector<Tag> splitTags(const std::string& src, const Where& w) {
  std::vector<Tag> tags;
  std::size_t p = 0;
  int line = 1;
  bool stripNext = false;  // the previous tag ended with '-': strip the following whitespace
  bool trimNewline = false;
  auto countLines = [&](std::size_t from, std::size_t to) {
    line += static_cast<int>(std::count(src.begin() + static_cast<std::ptrdiff_t>(from),
                                        src.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
  };
  while (p <= src.size()) {
    std::size_t open = src.find('{', p);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open + 1 >= src.size()) open = std::string::npos;
    const std::string raw = src.substr(p, open == std::string::npos ? std::string::npos : open - p);
    std::string text = raw;
    if (stripNext) {
      text.erase(0, text.find_first_not_of(kWhitespace) == std::string::npos ? text.size()
                                                                             : text.find_first_not_of(kWhitespace));
    } else if (trimNewline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    const int textLine = line;
    countLines(p, open == std::string::npos ? src.size() : open);
    if (open == std::string::npos) {
      if (!text.empty() && text.back() == '\n') text.pop_back();  // keep_trailing_newline = False
      if (!text.empty()) tags.push_back({Tag::Kind::kText, text, textLine});
      break;
    }
    const char kind = src[open + 1];
    const bool block = kind == '%' || kind == '#';
    const bool stripBefore = open + 2 < src.size() && src[open + 2] == '-';
    if (stripBefore) {
      const auto last = text.find_last_not_of(kWhitespace);
      text.erase(last == std::string::npos ? 0 : last + 1);
    } else if (block && !(open + 2 < src.size() && src[open + 2] == '+')) {
      // lstrip_blocks: spaces and tabs between the line start and a block tag go (in the source, only
      // whitespace lies between the last newline, or the template's start, and the tag).
      const auto newline = raw.find_last_of('\n');
      const bool lineStart = newline != std::string::npos
                                 ? raw.find_first_not_of(" \t", newline + 1) == std::string::npos
                                 : p == 0 && raw.find_first_not_of(" \t") == std::string::npos;
      if (lineStart) {
        const auto keep = text.find_last_not_of(" \t");
        text.erase(keep == std::string::npos ? 0 : keep + 1);
      }
    }
    if (!text.empty()) tags.push_back({Tag::Kind::kText, text, textLine});
    const std::size_t end = tagEnd(src, open, kind);
    if (end == std::string::npos) fail({w.name, line}, fmt::format("'{}' is never closed", src.substr(open, 2)));
    std::size_t innerStart = open + 2 + (stripBefore || (open + 2 < src.size() && src[open + 2] == '+') ? 1 : 0);
    const bool stripAfter = end > innerStart && src[end - 1] == '-';
    const std::string inner = src.substr(innerStart, end - innerStart - (stripAfter ? 1 : 0));
    if (kind == '{') tags.push_back({Tag::Kind::kOutput, inner, line});
    if (kind == '%') tags.push_back({Tag::Kind::kStatement, inner, line});
    countLines(open, end);
    stripNext = stripAfter;
    trimNewline = block;  // trim_blocks
    p = end + 2;
  }
  return tags;
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Tag> tags, const std::string& name) : tags_(std::move(tags)), name_(name) {}

  // Parses until one of `ends` (a statement's first word) or the end; returns that word ("" at the end).
  std::string parseBody(Body& body, const std::vector<std::string>& ends) {
    if (++depth_ > kMaxDepth) {
      fail({&name_, p_ < tags_.size() ? tags_[p_].line : 0}, fmt::format("blocks nested deeper than {}", kMaxDepth));
    }
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    while (p_ < tags_.size()) {
      const Tag& tag = tags_[p_++];
      const Where w{&name_, tag.line};
      if (tag.kind == Tag::Kind::kText) {
        auto t = std::make_unique<Text>();
        t->text = tag.text;
        body.push_back(std::move(t));
        continue;
      }
      ExpressionParser e(lexExpression(tag.text, w), w);
      if (tag.kind == Tag::Kind::kOutput) {
        auto o = std::make_unique<Output>();
        o->where = w;
        o->value = e.parse();
        e.expectEnd();
        body.push_back(std::move(o));
        continue;
      }
      const std::string word = e.name();
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
        current_ = std::move(e);
        return word;
      }
      if (word == "if") {
        body.push_back(parseIf(e, w));
      } else if (word == "for") {
        body.push_back(parseFor(e, w));
      } else if (word == "set") {
        auto s = std::make_unique<Set>();
        s->where = w;
        s->name = e.name();
        if (e.acceptOp(".")) s->attribute = e.name();
        if (!e.acceptOp("=")) fail(w, "block assignments ({% set x %}...{% endset %}) are not supported");
        s->value = e.parse();
        e.expectEnd();
        body.push_back(std::move(s));
      } else if (word == "macro") {
        body.push_back(parseMacro(e, w));
      } else if (word == "generation") {
        e.expectEnd();
        auto g = std::make_unique<Generation>();
        g->where = w;
        if (parseBody(g->body, {"endgeneration"}) != "endgeneration") fail(w, "{% generation %} is never closed");
        body.push_back(std::move(g));
      } else {
        fail(w, fmt::format("'{{% {} %}}' is not supported (docs/data.md lists the chat-template subset)", word));
      }
    }
    return "";
  }

 private:
  std::unique_ptr<Node> parseIf(ExpressionParser& e, const Where& w) {
    auto node = std::make_unique<If>();
    node->where = w;
    ExprPtr condition = e.parse();
    e.expectEnd();
    while (true) {
      Body body;
      const std::string end = parseBody(body, {"elif", "else", "endif"});
      node->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "endif") {
        current_->expectEnd();
        return node;
      }
      if (end == "elif") {
        condition = current_->parse();
        current_->expectEnd();
      } else if (end == "else") {
        current_->expectEnd();
        Body last;
        if (parseBody(last, {"endif"}) != "endif") fail(w, "{% if %} is never closed");
        node->branches.emplace_back(nullptr, std::move(last));
        return node;
      } else {
        fail(w, "{% if %} is never closed");
      }
    }
  }

  std::unique_ptr<Node> parseFor(ExpressionParser& e, const Where& w) {
    auto node = std::make_unique<For>();
    node->where = w;
    node->targets.push_back(e.name());
    while (e.acceptOp(",")) node->targets.push_back(e.name());
    if (!e.acceptName("in")) fail(w, "expected 'in' in {% for %}");
    node->iterable = e.parse();
    if (e.acceptName("recursive")) fail(w, "recursive loops are not supported");
    e.expectEnd();
    std::string end = parseBody(node->body, {"else", "endfor"});
    if (end == "else") {
      current_->expectEnd();
      end = parseBody(node->otherwise, {"endfor"});
    }
    if (end != "endfor") fail(w, "{% for %} is never closed");
    current_->expectEnd();
    return node;
  }

  std::unique_ptr<Node> parseMacro(ExpressionParser& e, const Where& w) {
    auto node = std::make_unique<Macro>();
    node->where = w;
    node->name = e.name();
    e.expectOp("(");
    while (!e.acceptOp(")")) {
      if (!node->parameters.empty()) e.expectOp(",");
      std::string parameter = e.name();
      ExprPtr fallback = e.acceptOp("=") ? e.parse() : nullptr;
      node->parameters.emplace_back(std::move(parameter), std::move(fallback));
    }
    e.expectEnd();
    if (parseBody(node->body, {"endmacro"}) != "endmacro") fail(w, "{% macro %} is never closed");
    current_->expectEnd();
    return node;
  }

  static constexpr int kMaxDepth = 64;
  std::vector<Tag> tags_;
  std::size_t p_ = 0;
  int depth_ = 0;
  const std::string& name_;
  std::optional<ExpressionParser> current_;  // the statement that ended the last body
};

Dict globals(const nlohmann::json& variables) {
  Dict d;
  if (!variables.is_object()) RP_THROW(InternalError, "chat template variables must be an object");
  for (const auto& [k, v] : variables.items()) d.emplace_back(k, fromJson(v));
  d.emplace_back("raise_exception",
                 Value::function([](const std::vector<Value>& args, const Dict&, const Where& at) -> Value {
                   fail(at, fmt::format("the template refused the conversation: {}",
                                        args.empty() ? std::string("raise_exception()") : str(args[0])));
                 }));
  d.emplace_back("namespace", Value::function([](const std::vector<Value>&, const Dict& named, const Where&) {
                   Value ns = Value::ofDict(named);
                   ns.isNamespace = true;
                   return ns;
                 }));
  d.emplace_back("strftime_now", Value::function([](const std::vector<Value>& args, const Dict&, const Where& at) {
                   if (args.empty() || args[0].kind != Value::Kind::kString) fail(at, "strftime_now() takes a format");
                   const std::time_t now = std::time(nullptr);
                   std::tm local{};
                   localtime_r(&now, &local);
                   char buffer[256];
                   const std::size_t n = std::strftime(buffer, sizeof(buffer), args[0].s.c_str(), &local);
                   return Value::string(std::string(buffer, n));
                 }));
  return d;
}

}  // namespace

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  const Where w{&name_, 1};
  TemplateParser parser(splitTags(source, w), name_);
  if (const std::string end = parser.parseBody(body_, {}); !end.empty()) {
    fail(w, fmt::format("'{{% {} %}}' without its opening statement", end));
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

Rendered Template::render(const nlohmann::json& variables) const {
  Context ctx(globals(variables));
  renderBody(body_, ctx);
  return {std::move(ctx.out), std::move(ctx.generation)};
}

}  // namespace rp::data::jinja
