// A driver for the fuzz targets where libFuzzer is not available (g++): runs
// LLVMFuzzerTestOneInput once per file named on the command line (folders
// are walked), or on -runs=N pseudo-random inputs. Options libFuzzer takes
// (-max_total_time=..., -runs=...) are accepted; the others are ignored.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 0;
  std::size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) {
      runs = std::strtol(a.c_str() + 6, nullptr, 10);
      continue;
    }
    if (a[0] == '-') continue;
    const std::filesystem::path p(a);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) {
          run_file(e.path());
          ++files;
        }
      }
    } else {
      run_file(p);
      ++files;
    }
  }
  std::mt19937_64 rng(1);
  std::vector<std::uint8_t> buf;
  for (long r = 0; r < runs; ++r) {
    buf.resize(rng() % 512);
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("%s: %zu files and %ld random inputs, no failure\n", argv[0], files, runs);
  return 0;
}
