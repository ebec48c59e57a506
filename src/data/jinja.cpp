#include "data/jinja.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::data::jinja {
namespace {

// ---- Values -------------------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
using Function = std::function<Value(const std::vector<Value>&, const Dict&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;  // shared: a namespace() is changed through every reference to it
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;
  bool isNamespace = false;  // a namespace(): the only dict `set x.attr = ...` may change

  static Value none() { return make(Kind::kNone); }
  static Value boolean(bool v) {
    Value x = make(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value integer(std::int64_t v) {
    Value x = make(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value real(double v) {
    Value x = make(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = make(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value ofList(List v) {
    Value x = make(Kind::kList);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value ofDict(Dict v) {
    Value x = make(Kind::kDict);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value function(Function f) {
    Value x = make(Kind::kFunction);
    x.fn = std::make_shared<Function>(std::move(f));
    return x;
  }
  static Value make(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  bool defined() const { return kind != Kind::kUndefined; }
  bool number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double asDouble() const { return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i); }
  const Value* find(const std::string& key) const {
    if (kind != Kind::kDict) return nullptr;
    for (const auto& [k, v] : *dict) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

const char* kindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kFunction:
      return "function";
  }
  return "?";
}

Value fromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(fromJson(e));
      return Value::ofList(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.emplace_back(k, fromJson(v));
      return Value::ofDict(std::move(d));
    }
    default:
      return Value();
  }
}

// Python's repr of a float (shortest round trip, always with a '.' or an exponent).
std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Python's json.dumps(ensure_ascii=False) of a string.
std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Python's json.dumps: ", " and ": " separators, or indented by `indent` spaces when it is >= 0.
std::string toJson(const Value& v, int indent, int depth = 0) {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(static_cast<std::size_t>(indent * depth), ' ') : "";
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return v.b ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return std::isfinite(v.f) ? floatText(v.f) : (std::isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity");
    case Value::Kind::kString:
      return jsonString(v.s);
    case Value::Kind::kList: {
      if (v.list->empty()) return "[]";
      std::string out = "[";
      for (std::size_t k = 0; k < v.list->size(); ++k)
        out += (k ? comma : "") + nl + toJson((*v.list)[k], indent, depth + 1);
      return out + close + "]";
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) return "{}";
      std::string out = "{";
      for (std::size_t k = 0; k < v.dict->size(); ++k) {
        const auto& [key, value] = (*v.dict)[k];
        out += (k ? comma : "") + nl + jsonString(key) + ": " + toJson(value, indent, depth + 1);
      }
      return out + close + "}";
    }
    case Value::Kind::kFunction:
      return "null";
  }
  return "null";
}

// Python's repr, for lists and dicts printed whole.
std::string repr(const Value& v);

// Python's str().
std::string str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return floatText(v.f);
    case Value::Kind::kString:
      return v.s;
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::kString) {
    std::string out = "'";
    for (const char c : v.s) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  if (v.kind == Value::Kind::kList) {
    std::string out = "[";
    for (std::size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
    return out + "]";
  }
  if (v.kind == Value::Kind::kDict) {
    std::string out = "{";
    for (std::size_t k = 0; k < v.dict->size(); ++k) {
      out += (k ? ", " : "") + repr(Value::string((*v.dict)[k].first)) + ": " + repr((*v.dict)[k].second);
    }
    return out + "}";
  }
  return str(v);
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  const bool an = a.number() || a.kind == Value::Kind::kBool, bn = b.number() || b.kind == Value::Kind::kBool;
  if (an && bn) return a.asDouble() == b.asDouble();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    case Value::Kind::kFunction:
      return a.fn == b.fn;
    default:
      return true;  // none == none, undefined == undefined
  }
}

// ---- Template errors ------------------------------------------------------------------------------------

struct Where {
  const std::string* name = nullptr;
  int line = 0;
};

[[noreturn]] void fail(const Where& w, const std::string& what) {
  RP_THROW(InputError, "chat template {}: line {}: {}", *w.name, w.line, what);
}

// ---- Lexing expressions ---------------------------------------------------------------------------------

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind = Kind::kEnd;
  std::string text;
};

std::vector<Token> lexExpression(const std::string& src, const Where& w) {
  std::vector<Token> out;
  std::size_t p = 0;
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++p;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t e = p;
      while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      out.push_back({Token::Kind::kName, src.substr(p, e - p)});
      p = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t e = p;
      bool real = false;
      while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '.' || src[e] == '_')) {
        if (src[e] == '.') {
          if (e + 1 >= src.size() || !std::isdigit(static_cast<unsigned char>(src[e + 1]))) break;
          real = true;
        }
        ++e;
      }
      if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
        real = true;
        ++e;
        if (e < src.size() && (src[e] == '+' || src[e] == '-')) ++e;
        while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
      }
      std::string text = src.substr(p, e - p);
      text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
      out.push_back({real ? Token::Kind::kFloat : Token::Kind::kInt, text});
      p = e;
    } else if (c == '\'' || c == '"') {
      std::string text;
      std::size_t e = p + 1;
      for (; e < src.size() && src[e] != c; ++e) {
        if (src[e] != '\\' || e + 1 >= src.size()) {
          text += src[e];
          continue;
        }
        const char n = src[++e];
        switch (n) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case '\\':
          case '\'':
          case '"':
            text += n;
            break;
          default:
            text += '\\';
            text += n;
        }
      }
      if (e >= src.size()) fail(w, "unterminated string literal");
      out.push_back({Token::Kind::kString, text});
      p = e + 1;
    } else {
      static const char* kOps[] = {"//", "==", "!=", "<=", ">=", "**", "+", "-", "*", "/", "%", "~", "<",
                                   ">",  "(",  ")",  "[",  "]",  "{",  "}", ".", ",", ":", "|", "="};
      bool matched = false;
      for (const char* op : kOps) {
        const std::size_t n = std::char_traits<char>::length(op);
        if (src.compare(p, n, op) == 0) {
          out.push_back({Token::Kind::kOp, op});
          p += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(w, fmt::format("unexpected character '{}'", c));
    }
  }
  out.push_back({Token::Kind::kEnd, ""});
  return out;
}

// ---- Expressions ----------------------------------------------------------------------------------------

class Context;

struct Expr {
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
  Where where;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

class Context {
 public:
  explicit Context(Dict globals) { scopes_.push_back(std::move(globals)); }
  Value lookup(const std::string& key) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      for (const auto& [k, v] : *s) {
        if (k == key) return v;
      }
    }
    return Value();
  }
  void set(const std::string& key, Value v) {
    auto& scope = scopes_.back();
    for (auto& [k, old] : scope) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    scope.emplace_back(key, std::move(v));
  }
  // Every loop iteration counts; a template that loops past the budget (a conversation needs a few per message)
  // is an error, not a hang.
  void step(const Where& w) {
    if (++steps_ > kStepBudget) fail(w, fmt::format("the template loops more than {} times", kStepBudget));
  }
  void push() { scopes_.emplace_back(); }
  void pop() { scopes_.pop_back(); }
  std::string out;
  std::vector<std::pair<std::size_t, std::size_t>> generation;

 private:
  static constexpr std::int64_t kStepBudget = 100'000;
  std::int64_t steps_ = 0;
  std::vector<Dict> scopes_;
};

struct Literal : Expr {
  Value value;
  Value eval(Context&) const override { return value; }
};

struct Name : Expr {
  std::string name;
  Value eval(Context& ctx) const override { return ctx.lookup(name); }
};

struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  Value eval(Context& ctx) const override {
    List l;
    for (const auto& e : items) l.push_back(e->eval(ctx));
    return Value::ofList(std::move(l));
  }
};

struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Context& ctx) const override {
    Dict d;
    for (const auto& [k, v] : items) {
      const Value key = k->eval(ctx);
      if (key.kind != Value::Kind::kString) fail(where, "dict keys must be strings");
      d.emplace_back(key.s, v->eval(ctx));
    }
    return Value::ofDict(std::move(d));
  }
};

Value attribute(const Value& obj, const std::string& name, const Where& w) {
  if (!obj.defined()) fail(w, fmt::format("'{}' of an undefined value", name));
  if (const Value* v = obj.find(name)) return *v;
  return Value();
}

Value item(const Value& obj, const Value& key, const Where& w) {
  if (!obj.defined()) fail(w, fmt::format("[{}] of an undefined value", repr(key)));
  if (obj.kind == Value::Kind::kDict) {
    if (key.kind != Value::Kind::kString) return Value();
    return attribute(obj, key.s, w);
  }
  if ((obj.kind == Value::Kind::kList || obj.kind == Value::Kind::kString) && key.kind == Value::Kind::kInt) {
    const auto n = static_cast<std::int64_t>(obj.kind == Value::Kind::kList ? obj.list->size() : obj.s.size());
    const std::int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value();
    return obj.kind == Value::Kind::kList ? (*obj.list)[static_cast<std::size_t>(k)]
                                          : Value::string(obj.s.substr(static_cast<std::size_t>(k), 1));
  }
  fail(w, fmt::format("cannot index a {} with a {}", kindName(obj.kind), kindName(key.kind)));
}

struct Attr : Expr {
  ExprPtr object;
  std::string name;
  Value eval(Context& ctx) const override { return attribute(object->eval(ctx), name, where); }
};

struct Index : Expr {
  ExprPtr object, key;
  Value eval(Context& ctx) const override { return item(object->eval(ctx), key->eval(ctx), where); }
};

struct Slice : Expr {
  ExprPtr object, start, stop, step;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx);
    if (obj.kind != Value::Kind::kList && obj.kind != Value::Kind::kString) {
      fail(where, fmt::format("cannot slice a {}", kindName(obj.kind)));
    }
    const auto n = static_cast<std::int64_t>(obj.kind == Value::Kind::kList ? obj.list->size() : obj.s.size());
    auto bound = [&](const ExprPtr& e) -> std::optional<std::int64_t> {
      if (!e) return std::nullopt;
      const Value v = e->eval(ctx);
      if (v.kind == Value::Kind::kNone) return std::nullopt;
      if (v.kind != Value::Kind::kInt) fail(where, "slice bounds must be integers");
      return v.i;
    };
    const std::int64_t s = bound(step).value_or(1);
    if (s == 0) fail(where, "slice step cannot be zero");
    // Python's slice.indices().
    auto clamp = [&](std::optional<std::int64_t> v, bool isStart) {
      if (!v) return s > 0 ? (isStart ? 0 : n) : (isStart ? n - 1 : -1);
      std::int64_t x = *v < 0 ? *v + n : *v;
      if (s > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t a = clamp(bound(start), true), b = clamp(bound(stop), false);
    List l;
    std::string text;
    for (std::int64_t k = a; s > 0 ? k < b : k > b; k += s) {
      if (obj.kind == Value::Kind::kList) {
        l.push_back((*obj.list)[static_cast<std::size_t>(k)]);
      } else {
        text += obj.s[static_cast<std::size_t>(k)];
      }
    }
    return obj.kind == Value::Kind::kList ? Value::ofList(std::move(l)) : Value::string(std::move(text));
  }
};

std::string stripChars(const std::string& s, const std::string& chars, bool left, bool right) {
  std::size_t a = 0, b = s.size();
  if (left) {
    while (a < b && chars.find(s[a]) != std::string::npos) ++a;
  }
  if (right) {
    while (b > a && chars.find(s[b - 1]) != std::string::npos) --b;
  }
  return s.substr(a, b - a);
}

const std::string kWhitespace = " \t\n\r\f\v";

Value callMethod(const Value& obj, const std::string& name, const std::vector<Value>& args, const Where& w) {
  auto arg = [&](std::size_t k) -> const Value& {
    if (k >= args.size()) fail(w, fmt::format("{}() needs more arguments", name));
    return args[k];
  };
  auto stringArg = [&](std::size_t k) -> const std::string& {
    const Value& v = arg(k);
    if (v.kind != Value::Kind::kString) fail(w, fmt::format("{}() takes a string", name));
    return v.s;
  };
  if (obj.kind == Value::Kind::kString) {
    const std::string& s = obj.s;
    if (name == "startswith") return Value::boolean(s.rfind(stringArg(0), 0) == 0);
    if (name == "endswith") {
      const std::string& x = stringArg(0);
      return Value::boolean(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const std::string chars = args.empty() || args[0].kind == Value::Kind::kNone ? kWhitespace : stringArg(0);
      return Value::string(stripChars(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "upper" || name == "lower") {
      std::string out = s;
      for (char& c : out) c = static_cast<char>(name == "upper" ? std::toupper(c) : std::tolower(c));
      return Value::string(out);
    }
    if (name == "split") {
      List parts;
      if (args.empty() || args[0].kind == Value::Kind::kNone) {
        std::size_t p = 0;
        while (true) {
          p = s.find_first_not_of(kWhitespace, p);
          if (p == std::string::npos) break;
          const std::size_t e = std::min(s.find_first_of(kWhitespace, p), s.size());
          parts.push_back(Value::string(s.substr(p, e - p)));
          p = e;
        }
        return Value::ofList(std::move(parts));
      }
      const std::string& sep = stringArg(0);
      if (sep.empty()) fail(w, "split() with an empty separator");
      std::size_t p = 0;
      for (std::size_t at; (at = s.find(sep, p)) != std::string::npos; p = at + sep.size()) {
        parts.push_back(Value::string(s.substr(p, at - p)));
      }
      parts.push_back(Value::string(s.substr(p)));
      return Value::ofList(std::move(parts));
    }
    if (name == "replace") {
      const std::string &from = stringArg(0), &to = stringArg(1);
      if (from.empty()) fail(w, "replace() with an empty pattern");
      std::string out;
      std::size_t p = 0;
      for (std::size_t at; (at = s.find(from, p)) != std::string::npos; p = at + from.size()) {
        out += s.substr(p, at - p) + to;
      }
      return Value::string(out + s.substr(p));
    }
    if (name == "join") {
      const Value& items = arg(0);
      if (items.kind != Value::Kind::kList) fail(w, "join() takes a list");
      std::string out;
      for (std::size_t k = 0; k < items.list->size(); ++k) out += (k ? s : "") + str((*items.list)[k]);
      return Value::string(out);
    }
  }
  if (obj.kind == Value::Kind::kDict) {
    if (name == "get") {
      const Value* v = obj.find(stringArg(0));
      return v != nullptr ? *v : (args.size() > 1 ? args[1] : Value::none());
    }
    if (name == "items" || name == "keys" || name == "values") {
      List l;
      for (const auto& [k, v] : *obj.dict) {
        if (name == "items") l.push_back(Value::ofList({Value::string(k), v}));
        if (name == "keys") l.push_back(Value::string(k));
        if (name == "values") l.push_back(v);
      }
      return Value::ofList(std::move(l));
    }
  }
  fail(w, fmt::format("method {}() of a {} is not supported", name, kindName(obj.kind)));
}

struct Call : Expr {
  ExprPtr callee;
  Arguments args;
  Value eval(Context& ctx) const override {
    std::vector<Value> positional;
    for (const auto& a : args.positional) positional.push_back(a->eval(ctx));
    Dict named;
    for (const auto& [k, a] : args.named) named.emplace_back(k, a->eval(ctx));
    if (const auto* attr = dynamic_cast<const Attr*>(callee.get())) {
      const Value obj = attr->object->eval(ctx);
      if (!obj.defined()) fail(where, fmt::format("{}() of an undefined value", attr->name));
      const Value* member = obj.find(attr->name);
      if (member == nullptr || member->kind != Value::Kind::kFunction) {
        return callMethod(obj, attr->name, positional, where);
      }
    }
    const Value f = callee->eval(ctx);
    if (f.kind != Value::Kind::kFunction) fail(where, fmt::format("a {} is not callable", kindName(f.kind)));
    return (*f.fn)(positional, named);
  }
};

struct Unary : Expr {
  std::string op;
  ExprPtr operand;
  Value eval(Context& ctx) const override {
    const Value v = operand->eval(ctx);
    if (op == "not") return Value::boolean(!truthy(v));
    if (v.kind == Value::Kind::kInt) {
      if (op == "-" && v.i == INT64_MIN) fail(where, "-(-2^63) overflows 64-bit integers");
      return Value::integer(op == "-" ? -v.i : v.i);
    }
    if (v.kind == Value::Kind::kFloat) return Value::real(op == "-" ? -v.f : v.f);
    fail(where, fmt::format("unary {} of a {}", op, kindName(v.kind)));
  }
};

bool contains(const Value& container, const Value& x, const Where& w) {
  switch (container.kind) {
    case Value::Kind::kString:
      if (x.kind != Value::Kind::kString) fail(w, "'in <string>' needs a string on the left");
      return container.s.find(x.s) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list->begin(), container.list->end(), [&](const Value& e) { return equal(e, x); });
    case Value::Kind::kDict:
      return x.kind == Value::Kind::kString && container.find(x.s) != nullptr;
    default:
      fail(w, fmt::format("'in' a {}", kindName(container.kind)));
  }
}

// Strings and lists a template builds are bounded: a template that doubles a string in a loop fails, not the host.
constexpr std::size_t kMaxSize = std::size_t{1} << 26;

Value concatenated(std::string text, const Where& w) {
  if (text.size() > kMaxSize) fail(w, fmt::format("the template builds a string of more than {} bytes", kMaxSize));
  return Value::string(std::move(text));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, const Where& w) {
  if (!a.defined() || !b.defined()) fail(w, fmt::format("'{}' with an undefined value", op));
  if (op == "+" && a.kind == Value::Kind::kString && b.kind == Value::Kind::kString) {
    return concatenated(a.s + b.s, w);
  }
  if (op == "+" && a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    if (a.list->size() + b.list->size() > kMaxSize) fail(w, "the template builds a list too long");
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value::ofList(std::move(l));
  }
  const bool an = a.number() || a.kind == Value::Kind::kBool, bn = b.number() || b.kind == Value::Kind::kBool;
  if (!an || !bn) fail(w, fmt::format("'{}' of a {} and a {}", op, kindName(a.kind), kindName(b.kind)));
  const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  const double x = a.asDouble(), y = b.asDouble();
  if (op == "/") {
    if (y == 0) fail(w, "division by zero");
    return Value::real(x / y);
  }
  if (ints) {
    const std::int64_t p = a.kind == Value::Kind::kBool ? a.b : a.i, q = b.kind == Value::Kind::kBool ? b.b : b.i;
    // Python's integers do not overflow; ours are 64-bit and say so.
    std::int64_t r = 0;
    const bool overflow = op == "+"   ? __builtin_add_overflow(p, q, &r)
                          : op == "-" ? __builtin_sub_overflow(p, q, &r)
                          : op == "*" ? __builtin_mul_overflow(p, q, &r)
                                      : (q == -1 && p == INT64_MIN);
    if (overflow) fail(w, fmt::format("{} {} {} overflows 64-bit integers", p, op, q));
    if (op == "+" || op == "-" || op == "*") return Value::integer(r);
    if (q == 0) fail(w, "division by zero");
    const std::int64_t floor = p / q - ((p % q != 0) && ((p < 0) != (q < 0)) ? 1 : 0);
    if (op == "//") return Value::integer(floor);
    if (op == "%") return Value::integer(p - floor * q);
  } else {
    if (op == "+") return Value::real(x + y);
    if (op == "-") return Value::real(x - y);
    if (op == "*") return Value::real(x * y);
    if (y == 0) fail(w, "division by zero");
    if (op == "//") return Value::real(std::floor(x / y));
    if (op == "%") return Value::real(x - std::floor(x / y) * y);
  }
  fail(w, fmt::format("operator '{}' is not supported", op));
}

struct Binary : Expr {
  std::string op;
  ExprPtr left, right;
  Value eval(Context& ctx) const override {
    if (op == "and") {
      const Value l = left->eval(ctx);
      return truthy(l) ? right->eval(ctx) : l;
    }
    if (op == "or") {
      const Value l = left->eval(ctx);
      return truthy(l) ? l : right->eval(ctx);
    }
    const Value l = left->eval(ctx), r = right->eval(ctx);
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "in") return Value::boolean(contains(r, l, where));
    if (op == "not in") return Value::boolean(!contains(r, l, where));
    if (op == "~") return concatenated(str(l) + str(r), where);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c = 0;
      if ((l.number() || l.kind == Value::Kind::kBool) && (r.number() || r.kind == Value::Kind::kBool)) {
        c = l.asDouble() < r.asDouble() ? -1 : l.asDouble() > r.asDouble() ? 1 : 0;
      } else if (l.kind == Value::Kind::kString && r.kind == Value::Kind::kString) {
        c = l.s.compare(r.s);
      } else {
        fail(where, fmt::format("'{}' between a {} and a {}", op, kindName(l.kind), kindName(r.kind)));
      }
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    return arithmetic(op, l, r, where);
  }
};

struct Conditional : Expr {
  ExprPtr value, condition, otherwise;
  Value eval(Context& ctx) const override {
    if (truthy(condition->eval(ctx))) return value->eval(ctx);
    return otherwise ? otherwise->eval(ctx) : Value();
  }
};

Value applyFilter(const std::string& name, const Value& v, const std::vector<Value>& args, const Dict& named,
                  const Where& w) {
  auto namedOr = [&](const char* key, std::size_t position) -> const Value* {
    for (const auto& [k, x] : named) {
      if (k == key) return &x;
    }
    return position < args.size() ? &args[position] : nullptr;
  };
  if (name == "length" || name == "count") {
    if (v.kind == Value::Kind::kString) return Value::integer(static_cast<std::int64_t>(v.s.size()));
    if (v.kind == Value::Kind::kList) return Value::integer(static_cast<std::int64_t>(v.list->size()));
    if (v.kind == Value::Kind::kDict) return Value::integer(static_cast<std::int64_t>(v.dict->size()));
    fail(w, fmt::format("length of a {}", kindName(v.kind)));
  }
  if (name == "trim") return Value::string(stripChars(str(v), kWhitespace, true, true));
  if (name == "upper" || name == "lower") return callMethod(Value::string(str(v)), name, {}, w);
  if (name == "capitalize") {
    std::string s = str(v);
    for (std::size_t k = 0; k < s.size(); ++k) s[k] = static_cast<char>(k ? std::tolower(s[k]) : std::toupper(s[k]));
    return Value::string(s);
  }
  if (name == "string") return Value::string(str(v));
  if (name == "safe") return v;
  if (name == "tojson") {
    const Value* indent = namedOr("indent", 0);
    return Value::string(
        toJson(v, indent != nullptr && indent->kind == Value::Kind::kInt ? static_cast<int>(indent->i) : -1));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = namedOr("default_value", 0);
    const Value* boolean = namedOr("boolean", 1);
    const bool useFallback = !v.defined() || (boolean != nullptr && truthy(*boolean) && !truthy(v));
    return useFallback ? (fallback != nullptr ? *fallback : Value::string("")) : v;
  }
  if (name == "first" || name == "last") {
    if (v.kind == Value::Kind::kList) {
      if (v.list->empty()) return Value();
      return name == "first" ? v.list->front() : v.list->back();
    }
    if (v.kind == Value::Kind::kString) {
      if (v.s.empty()) return Value();
      return Value::string(std::string(1, name == "first" ? v.s.front() : v.s.back()));
    }
    fail(w, fmt::format("{} of a {}", name, kindName(v.kind)));
  }
  if (name == "join") {
    const Value* sep = namedOr("d", 0);
    return callMethod(Value::string(sep != nullptr ? str(*sep) : ""), "join", {v}, w);
  }
  if (name == "list") {
    if (v.kind == Value::Kind::kList) return v;
    if (v.kind == Value::Kind::kString) {
      List l;
      for (const char c : v.s) l.push_back(Value::string(std::string(1, c)));
      return Value::ofList(std::move(l));
    }
    if (v.kind == Value::Kind::kDict) return callMethod(v, "keys", {}, w);
    fail(w, fmt::format("list of a {}", kindName(v.kind)));
  }
  if (name == "reverse") {
    if (v.kind == Value::Kind::kString) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
    if (v.kind == Value::Kind::kList) return Value::ofList(List(v.list->rbegin(), v.list->rend()));
    fail(w, fmt::format("reverse of a {}", kindName(v.kind)));
  }
  if (name == "items") return callMethod(v, "items", {}, w);
  if (name == "replace") return callMethod(Value::string(str(v)), "replace", args, w);
  if (name == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.kind == Value::Kind::kFloat) return Value::integer(static_cast<std::int64_t>(v.f));
    if (v.kind == Value::Kind::kBool) return Value::integer(v.b);
    if (v.kind == Value::Kind::kString) {
      try {
        return Value::integer(std::stoll(v.s));
      } catch (const std::exception&) {
      }
    }
    return Value::integer(0);
  }
  fail(w, fmt::format("filter '{}' is not supported (docs/data.md lists the chat-template subset)", name));
}

struct Filter : Expr {
  ExprPtr value;
  std::string name;
  Arguments args;
  Value eval(Context& ctx) const override {
    std::vector<Value> positional;
    for (const auto& a : args.positional) positional.push_back(a->eval(ctx));
    Dict named;
    for (const auto& [k, a] : args.named) named.emplace_back(k, a->eval(ctx));
    return applyFilter(name, value->eval(ctx), positional, named, where);
  }
};

bool applyTest(const std::string& name, const Value& v, const std::vector<Value>& args, const Where& w) {
  using K = Value::Kind;
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.kind == K::kString;
  if (name == "number") return v.kind == K::kInt || v.kind == K::kFloat;
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kString || v.kind == K::kDict;
  if (name == "iterable") return v.kind == K::kList || v.kind == K::kString || v.kind == K::kDict;
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "odd" || name == "even") {
    if (v.kind != K::kInt) fail(w, fmt::format("'is {}' of a {}", name, kindName(v.kind)));
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (v.kind != K::kInt || args.empty() || args[0].kind != K::kInt || args[0].i == 0) {
      fail(w, "'is divisibleby' needs integers");
    }
    return v.i % args[0].i == 0;
  }
  if (name == "equalto" || name == "eq" || name == "sameas") {
    if (args.empty()) fail(w, fmt::format("'is {}' needs a value", name));
    return equal(v, args[0]);
  }
  fail(w, fmt::format("test 'is {}' is not supported (docs/data.md lists the chat-template subset)", name));
}

struct Test : Expr {
  ExprPtr value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  Value eval(Context& ctx) const override {
    std::vector<Value> values;
    for (const auto& a : args) values.push_back(a->eval(ctx));
    return Value::boolean(applyTest(name, value->eval(ctx), values, where) != negated);
  }
};

class ExpressionParser {
 public:
  ExpressionParser(std::vector<Token> tokens, Where w) : t_(std::move(tokens)), w_(w) {}

  ExprPtr parse() { return expression(); }
  bool atEnd() const { return peek().kind == Token::Kind::kEnd; }
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool acceptName(const char* name) {
    if (peek().kind == Token::Kind::kName && peek().text == name) {
      ++p_;
      return true;
    }
    return false;
  }
  bool acceptOp(const char* op) {
    if (peek().kind == Token::Kind::kOp && peek().text == op) {
      ++p_;
      return true;
    }
    return false;
  }
  void expectOp(const char* op) {
    if (!acceptOp(op)) fail(w_, fmt::format("expected '{}', found '{}'", op, peek().text));
  }
  std::string name() {
    if (peek().kind != Token::Kind::kName) fail(w_, fmt::format("expected a name, found '{}'", peek().text));
    return t_[p_++].text;
  }
  void expectEnd() {
    if (!atEnd()) fail(w_, fmt::format("unexpected '{}'", peek().text));
  }
  ExprPtr expression() {
    ExprPtr value = orExpr();
    if (acceptName("if")) {
      auto c = make<Conditional>();
      c->value = std::move(value);
      c->condition = orExpr();
      if (acceptName("else")) c->otherwise = expression();
      return c;
    }
    return value;
  }

 private:
  template <typename T>
  std::unique_ptr<T> make() {
    auto e = std::make_unique<T>();
    e->where = w_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    auto b = make<Binary>();
    b->op = std::move(op);
    b->left = std::move(l);
    b->right = std::move(r);
    return b;
  }
  ExprPtr orExpr() {
    ExprPtr l = andExpr();
    while (acceptName("or")) l = binary("or", std::move(l), andExpr());
    return l;
  }
  ExprPtr andExpr() {
    ExprPtr l = notExpr();
    while (acceptName("and")) l = binary("and", std::move(l), notExpr());
    return l;
  }
  // Nesting is bounded (parentheses, unary operators, lists), so a hostile template fails instead of overflowing
  // the stack.
  struct Nest {
    explicit Nest(ExpressionParser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) fail(p_.w_, fmt::format("expression nested deeper than {}", kMaxDepth));
    }
    ~Nest() { --p_.depth_; }
    ExpressionParser& p_;
  };
  ExprPtr notExpr() {
    const Nest nest(*this);
    if (acceptName("not")) {
      auto u = make<Unary>();
      u->op = "not";
      u->operand = notExpr();
      return u;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr l = concat();
    while (true) {
      if (peek().kind == Token::Kind::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                              peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const std::string op = t_[p_++].text;
        l = binary(op, std::move(l), concat());
      } else if (acceptName("in")) {
        l = binary("in", std::move(l), concat());
      } else if (peek().kind == Token::Kind::kName && peek().text == "not" && peek(1).text == "in") {
        p_ += 2;
        l = binary("not in", std::move(l), concat());
      } else {
        return l;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr l = sum();
    while (acceptOp("~")) l = binary("~", std::move(l), sum());
    return l;
  }
  ExprPtr sum() {
    ExprPtr l = product();
    while (peek().kind == Token::Kind::kOp && (peek().text == "+" || peek().text == "-")) {
      const std::string op = t_[p_++].text;
      l = binary(op, std::move(l), product());
    }
    return l;
  }
  ExprPtr product() {
    ExprPtr l = unary();
    while (peek().kind == Token::Kind::kOp &&
           (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
      const std::string op = t_[p_++].text;
      l = binary(op, std::move(l), unary());
    }
    if (peek().kind == Token::Kind::kOp && peek().text == "**") fail(w_, "'**' is not supported");
    return l;
  }
  ExprPtr unary() {
    const Nest nest(*this);
    if (peek().kind == Token::Kind::kOp && (peek().text == "-" || peek().text == "+")) {
      auto u = make<Unary>();
      u->op = t_[p_++].text;
      u->operand = unary();
      return u;
    }
    ExprPtr e = postfix(primary());
    while (acceptOp("|")) {
      auto f = make<Filter>();
      f->value = std::move(e);
      f->name = name();
      if (acceptOp("(")) f->args = arguments();
      e = postfix(std::move(f));
    }
    if (acceptName("is")) {
      auto t = make<Test>();
      t->value = std::move(e);
      t->negated = acceptName("not");
      t->name = peek().kind == Token::Kind::kName ? name() : "";
      if (t->name.empty()) fail(w_, "expected a test name after 'is'");
      if (acceptOp("(")) {
        for (auto& a : arguments().positional) t->args.push_back(std::move(a));
      } else if (peek().kind == Token::Kind::kString || peek().kind == Token::Kind::kInt ||
                 peek().kind == Token::Kind::kFloat) {
        t->args.push_back(primary());  // `is divisibleby 3`
      }
      e = std::move(t);
    }
    return e;
  }
  Arguments arguments() {  // after '('
    Arguments a;
    if (acceptOp(")")) return a;
    do {
      if (peek().kind == Token::Kind::kName && peek(1).kind == Token::Kind::kOp && peek(1).text == "=") {
        std::string key = name();
        ++p_;
        a.named.emplace_back(std::move(key), expression());
      } else {
        a.positional.push_back(expression());
      }
    } while (acceptOp(","));
    expectOp(")");
    return a;
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (acceptOp(".")) {
        auto a = make<Attr>();
        a->object = std::move(e);
        a->name = peek().kind == Token::Kind::kInt ? t_[p_++].text : name();
        e = std::move(a);
      } else if (acceptOp("[")) {
        ExprPtr first;
        if (!(peek().kind == Token::Kind::kOp && peek().text == ":")) first = expression();
        if (acceptOp(":")) {
          auto s = make<Slice>();
          s->object = std::move(e);
          s->start = std::move(first);
          if (!(peek().kind == Token::Kind::kOp && (peek().text == "]" || peek().text == ":"))) s->stop = expression();
          if (acceptOp(":") && !(peek().kind == Token::Kind::kOp && peek().text == "]")) s->step = expression();
          expectOp("]");
          e = std::move(s);
        } else {
          expectOp("]");
          auto i = make<Index>();
          i->object = std::move(e);
          i->key = std::move(first);
          e = std::move(i);
        }
      } else if (acceptOp("(")) {
        auto c = make<Call>();
        c->callee = std::move(e);
        c->args = arguments();
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token tok = peek();
    auto literal = [&](Value v) {
      ++p_;
      auto l = make<Literal>();
      l->value = std::move(v);
      return l;
    };
    switch (tok.kind) {
      case Token::Kind::kString: {
        auto l = literal(Value::string(tok.text));
        while (peek().kind == Token::Kind::kString) l->value.s += t_[p_++].text;  // adjacent literals join
        return l;
      }
      case Token::Kind::kInt: {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (ec != std::errc() || end != tok.text.data() + tok.text.size()) {
          fail(w_, fmt::format("integer literal {} is out of range", tok.text));
        }
        return literal(Value::integer(v));
      }
      case Token::Kind::kFloat:
        return literal(Value::real(std::strtod(tok.text.c_str(), nullptr)));
      case Token::Kind::kName:
        if (tok.text == "true" || tok.text == "True") return literal(Value::boolean(true));
        if (tok.text == "false" || tok.text == "False") return literal(Value::boolean(false));
        if (tok.text == "none" || tok.text == "None") return literal(Value::none());
        {
          auto n = make<Name>();
          n->name = name();
          return n;
        }
      case Token::Kind::kOp:
        if (acceptOp("(")) {
          ExprPtr e = expression();
          if (peek().kind == Token::Kind::kOp && peek().text == ",") fail(w_, "tuples are not supported");
          expectOp(")");
          return e;
        }
        if (acceptOp("[")) {
          auto l = make<ListExpr>();
          if (!acceptOp("]")) {
            do {
              if (peek().kind == Token::Kind::kOp && peek().text == "]") break;
              l->items.push_back(expression());
            } while (acceptOp(","));
            expectOp("]");
          }
          return l;
        }
        if (acceptOp("{")) {
          auto d = make<DictExpr>();
          if (!acceptOp("}")) {
            do {
              if (peek().kind == Token::Kind::kOp && peek().text == "}") break;
              ExprPtr k = expression();
              expectOp(":");
              d->items.emplace_back(std::move(k), expression());
            } while (acceptOp(","));
            expectOp("}");
          }
          return d;
        }
        break;
      case Token::Kind::kEnd:
        fail(w_, "expression ends early");
    }
    fail(w_, fmt::format("unexpected '{}'", tok.text));
  }

  static constexpr int kMaxDepth = 64;
  std::vector<Token> t_;
  std::size_t p_ = 0;
  Where w_;
  int depth_ = 0;
};

}  // namespace

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

// ---- Template lexing: text and tags, with transformers' whitespace settings ------------------------------

struct Tag {
  enum class Kind { kText, kOutput, kStatement } kind;
  std::string text;
  int line = 1;
};

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
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t end = src.find(close, open + 2);
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

  static constexpr int kMaxDepth = 64;
  std::vector<Tag> tags_;
  std::size_t p_ = 0;
  int depth_ = 0;
  const std::string& name_;
  std::optional<ExpressionParser> current_;  // the statement that ended the last body
};

Dict globals(const nlohmann::json& variables, const Where& w) {
  Dict d;
  if (!variables.is_object()) RP_THROW(InternalError, "chat template variables must be an object");
  for (const auto& [k, v] : variables.items()) d.emplace_back(k, fromJson(v));
  d.emplace_back("raise_exception", Value::function([w](const std::vector<Value>& args, const Dict&) -> Value {
                   fail(w, fmt::format("the template refused the conversation: {}",
                                       args.empty() ? std::string("raise_exception()") : str(args[0])));
                 }));
  d.emplace_back("namespace", Value::function([](const std::vector<Value>&, const Dict& named) {
                   Value ns = Value::ofDict(named);
                   ns.isNamespace = true;
                   return ns;
                 }));
  d.emplace_back("strftime_now", Value::function([w](const std::vector<Value>& args, const Dict&) {
                   if (args.empty() || args[0].kind != Value::Kind::kString) fail(w, "strftime_now() takes a format");
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
  Context ctx(globals(variables, Where{&name_, 0}));
  renderBody(body_, ctx);
  return {std::move(ctx.out), std::move(ctx.generation)};
}

}  // namespace rp::data::jinja
