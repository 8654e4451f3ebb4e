// Fuzz target: Config::apply() on arbitrary "key:value,..." text. A rejected
// string must throw config_error with a "memlake config: " message and leave
// the config as it was; an accepted one must survive a round trip through
// describe() (every value it prints parses back to the same config).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "memlake/config.hpp"
#include "memlake/errors.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_config: %s\n%s\n", what, detail.c_str());
  __builtin_trap();
}

// "key:value,key:value,..." from describe()'s "key:value  # ..." lines.
std::string conf_of(const std::string& described) {
  std::string conf;
  std::size_t at = 0;
  while (at < described.size()) {
    std::size_t end = described.find('\n', at);
    if (end == std::string::npos) end = described.size();
    const std::string line = described.substr(at, end - at);
    const std::size_t space = line.find(' ');
    if (!conf.empty()) conf += ',';
    conf += line.substr(0, space);
    at = end + 1;
  }
  return conf;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memlake::Config c;
  // Start from a non-default config half of the time, so that "unchanged on
  // error" is checked against values that are not the defaults.
  if (size > 0 && (data[0] & 1)) c.apply("capacity:3G,fit_slack:0.5,on_misuse:abort,device:7");
  const std::string before = c.describe();
  try {
    c.apply(text);
  } catch (const memlake::config_error& e) {
    if (std::string_view(e.what()).rfind("memlake config: ", 0) != 0)
      fail("message without the prefix", e.what());
    if (c.describe() != before) fail("a failed apply changed the config", std::string(text));
    return 0;
  } catch (const std::exception& e) {
    fail("an exception other than config_error", e.what());
  }
  const std::string after = c.describe();
  const std::string conf = conf_of(after);
  memlake::Config back;
  try {
    back.apply(conf);
  } catch (const std::exception& e) {
    fail("describe() printed a value that does not parse back", conf + "\n" + e.what());
  }
  if (back.describe() != after) fail("describe() does not round-trip", conf);
  return 0;
}
