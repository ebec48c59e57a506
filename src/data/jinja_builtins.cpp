#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <exception>

#include "data/jinja_internal.h"

namespace rp::data::jinja::detail {

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
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    // select(test, args...) / selectattr(attribute, test, args...): the items whose value (or attribute) passes
    // the test, or is truthy without one; reject* keeps the others.
    if (v.kind != Value::Kind::kList) fail(w, fmt::format("{} of a {}", name, kindName(v.kind)));
    const bool byAttribute = name.size() > 4 && name.compare(name.size() - 4, 4, "attr") == 0;
    const bool keep = name[0] == 's';
    if (byAttribute && (args.empty() || args[0].kind != Value::Kind::kString)) {
      fail(w, fmt::format("{} needs an attribute name", name));
    }
    const std::size_t testAt = byAttribute ? 1 : 0;
    if (args.size() > testAt && args[testAt].kind != Value::Kind::kString)
      fail(w, fmt::format("{} needs a test name", name));
    const std::vector<Value> testArgs(args.begin() + static_cast<std::ptrdiff_t>(std::min(args.size(), testAt + 1)),
                                      args.end());
    List kept;
    for (const Value& x : *v.list) {
      const Value subject = byAttribute ? attribute(x, args[0].s, w) : x;
      const bool passes = args.size() > testAt ? applyTest(args[testAt].s, subject, testArgs, w) : truthy(subject);
      if (passes == keep) kept.push_back(x);
    }
    return Value::ofList(std::move(kept));
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

}  // namespace rp::data::jinja::detail
