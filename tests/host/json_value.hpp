// A small JSON reader for the tests of what memlake writes as JSON (the
// timeline, the memory snapshot): strict (RFC 8259), into a tree of Values.
// parse() throws std::runtime_error with the offset of the first error.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace memlake::test {

struct JsonValue {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool b = false;
  double number = 0;
  std::string text;  // a string's value; a number's digits as written
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;

  bool is(Type t) const { return type == t; }
  bool has(const std::string& k) const { return type == Type::object && members.count(k) != 0; }
  const JsonValue& operator[](const std::string& k) const {
    auto it = members.find(k);
    if (type != Type::object || it == members.end())
      throw std::runtime_error("JSON: no member \"" + k + "\"");
    return it->second;
  }
  const JsonValue& operator[](std::size_t i) const { return items.at(i); }
  // An integer written without fraction or exponent, exactly.
  std::int64_t integer() const {
    if (type != Type::number || text.find_first_of(".eE") != std::string::npos)
      throw std::runtime_error("JSON: not an integer: " + text);
    return std::strtoll(text.c_str(), nullptr, 10);
  }
  const std::string& str() const {
    if (type != Type::string) throw std::runtime_error("JSON: not a string");
    return text;
  }
};

class JsonReader {
 public:
  static JsonValue parse(std::string_view s) {
    JsonReader r(s);
    JsonValue v = r.value();
    r.space();
    if (r.at_ != s.size()) r.fail("text after the value");
    return v;
  }

 private:
  explicit JsonReader(std::string_view s) : s_(s) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }
  void space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  char peek() {
    space();
    if (at_ >= s_.size()) fail("unexpected end");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  bool word(std::string_view w) {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }

  JsonValue value() {
    const char c = peek();
    JsonValue v;
    if (c == '{') {
      v.type = JsonValue::Type::object;
      ++at_;
      if (peek() == '}') return ++at_, v;
      for (;;) {
        if (peek() != '"') fail("expected a member name");
        std::string k = string();
        expect(':');
        if (!v.members.emplace(k, value()).second) fail("duplicate member \"" + k + "\"");
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = JsonValue::Type::array;
      ++at_;
      if (peek() == ']') return ++at_, v;
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = JsonValue::Type::string;
      v.text = string();
      return v;
    }
    if (word("true")) return v.type = JsonValue::Type::boolean, v.b = true, v;
    if (word("false")) return v.type = JsonValue::Type::boolean, v;
    if (word("null")) return v;
    return number();
  }

  JsonValue number() {
    const std::size_t begin = at_;
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    auto digits = [&] {
      const std::size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      if (at_ == from) fail("expected a digit");
    };
    if (at_ < s_.size() && s_[at_] == '0')
      ++at_;
    else
      digits();
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      digits();
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      digits();
    }
    JsonValue v;
    v.type = JsonValue::Type::number;
    v.text = std::string(s_.substr(begin, at_ - begin));
    v.number = std::strtod(v.text.c_str(), nullptr);
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) fail("unterminated string");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("unterminated escape");
      const char e = s_[at_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("short \\u escape");
          const unsigned long cp =
              std::strtoul(std::string(s_.substr(at_, 4)).c_str(), nullptr, 16);
          at_ += 4;
          if (cp >= 0x80) fail("non-ASCII \\u escape (not written by memlake)");
          out += static_cast<char>(cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  std::string_view s_;
  std::size_t at_ = 0;
};

}  // namespace memlake::test
