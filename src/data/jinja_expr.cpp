#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <optional>

#include "data/jinja_internal.h"

namespace rp::data::jinja::detail {

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

namespace {

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
    return (*f.fn)(positional, named, where);
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

}  // namespace

template <typename T>
std::unique_ptr<T> ExpressionParser::make() {
  auto e = std::make_unique<T>();
  e->where = w_;
  return e;
}

struct ExpressionParser::Nest {
  explicit Nest(ExpressionParser& p) : p_(p) {
    if (++p_.depth_ > kMaxDepth) fail(p_.w_, fmt::format("expression nested deeper than {}", kMaxDepth));
  }
  ~Nest() { --p_.depth_; }
  ExpressionParser& p_;
};

ExprPtr ExpressionParser::expression() {
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

ExprPtr ExpressionParser::binary(std::string op, ExprPtr l, ExprPtr r) {
  auto b = make<Binary>();
  b->op = std::move(op);
  b->left = std::move(l);
  b->right = std::move(r);
  return b;
}

ExprPtr ExpressionParser::orExpr() {
  ExprPtr l = andExpr();
  while (acceptName("or")) l = binary("or", std::move(l), andExpr());
  return l;
}

ExprPtr ExpressionParser::andExpr() {
  ExprPtr l = notExpr();
  while (acceptName("and")) l = binary("and", std::move(l), notExpr());
  return l;
}

ExprPtr ExpressionParser::notExpr() {
  const Nest nest(*this);
  if (acceptName("not")) {
    auto u = make<Unary>();
    u->op = "not";
    u->operand = notExpr();
    return u;
  }
  return compare();
}

ExprPtr ExpressionParser::compare() {
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

ExprPtr ExpressionParser::concat() {
  ExprPtr l = sum();
  while (acceptOp("~")) l = binary("~", std::move(l), sum());
  return l;
}

ExprPtr ExpressionParser::sum() {
  ExprPtr l = product();
  while (peek().kind == Token::Kind::kOp && (peek().text == "+" || peek().text == "-")) {
    const std::string op = t_[p_++].text;
    l = binary(op, std::move(l), product());
  }
  return l;
}

ExprPtr ExpressionParser::product() {
  ExprPtr l = unary();
  while (peek().kind == Token::Kind::kOp &&
         (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
    const std::string op = t_[p_++].text;
    l = binary(op, std::move(l), unary());
  }
  if (peek().kind == Token::Kind::kOp && peek().text == "**") fail(w_, "'**' is not supported");
  return l;
}

ExprPtr ExpressionParser::unary() {
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

Arguments ExpressionParser::arguments() {
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

ExprPtr ExpressionParser::postfix(ExprPtr e) {
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

ExprPtr ExpressionParser::primary() {
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

}  // namespace rp::data::jinja::detail
