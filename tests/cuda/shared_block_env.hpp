// A SharedBlock handed to a child process (tests/spawn_self.hpp) through one
// environment variable, "size offset fd:size fd:size ...": the parent keeps
// the descriptors open across exec, the child inherits them.
#pragma once

#include <cstdlib>
#include <string>

#include "memlake/sharing.hpp"
#include "spawn_self.hpp"

namespace memlake::test {

inline std::string shared_block_text(const SharedBlock& s) {
  std::string text = std::to_string(s.size) + " " + std::to_string(s.offset);
  for (const SharedBlock::Chunk& c : s.chunks) {
    keep_across_exec(c.fd);
    text += ' ' + std::to_string(c.fd) + ':' + std::to_string(c.size);
  }
  return text;
}

inline SharedBlock parse_shared_block(const char* text) {
  SharedBlock b;
  char* end = nullptr;
  b.size = std::strtoull(text, &end, 10);
  b.offset = std::strtoull(end, &end, 10);
  while (*end == ' ') {
    const int fd = static_cast<int>(std::strtol(end, &end, 10));
    b.chunks.push_back({fd, std::strtoull(end + 1, &end, 10)});
  }
  return b;
}

}  // namespace memlake::test
