// Runs this test binary again as another process, with one gtest filter and
// extra environment variables, and returns its exit status (-1 if it could
// not run or did not exit normally). Tests of process sharing use it: the
// child inherits descriptors the parent leaves open across exec.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <string>
#include <vector>

extern char** environ;

namespace memlake::test {

inline void keep_across_exec(int fd) {
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
}

inline int run_self(const std::string& test, const std::vector<std::string>& env) {
  std::vector<std::string> strings;
  for (char** e = environ; *e; ++e) strings.emplace_back(*e);
  strings.insert(strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=" + test;
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t child = 0;
  if (posix_spawn(&child, self.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace memlake::test
