#!/usr/bin/env bash
# Installs a memlake build into a temporary prefix, then builds and runs the
# consumer in this folder against it: with find_package(memlake CONFIG) and
# with pkg-config (memlake.pc, memlake-static.pc), in C and C++, shared and
# static. Usage: tests/install_consumer/run.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "-- install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
"$prefix/bin/memlake-replay" --help >/dev/null

echo "-- find_package(memlake CONFIG REQUIRED)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$here" -B "$work/cmake" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake"
ctest --test-dir "$work/cmake" --output-on-failure -V | grep -E "memlake consumer|tests passed|Failed"

echo "-- pkg-config"
PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name memlake.pc)")
export PKG_CONFIG_PATH
strict=(-Wall -Wextra -Wpedantic -Werror)
libdir=$(pkg-config --variable=libdir memlake)
read -ra cflags <<<"$(pkg-config --cflags memlake)"
read -ra shared_libs <<<"$(pkg-config --libs memlake)"
read -ra static_libs <<<"$(pkg-config --libs memlake-static)"
cc -std=c11 "${strict[@]}" "${cflags[@]}" "$here/consumer.c" -o "$work/pc_c_shared" \
  "${shared_libs[@]}" -Wl,-rpath,"$libdir"
c++ -std=c++20 "${strict[@]}" "${cflags[@]}" "$here/consumer.cpp" -o "$work/pc_cpp_shared" \
  "${shared_libs[@]}" -Wl,-rpath,"$libdir"
cc -std=c11 "${strict[@]}" "${cflags[@]}" "$here/consumer.c" -o "$work/pc_c_static" "${static_libs[@]}"
c++ -std=c++20 "${strict[@]}" "${cflags[@]}" "$here/consumer.cpp" -o "$work/pc_cpp_static" \
  "${static_libs[@]}"
for kind in shared static; do
  for lang in c cpp; do
    exe=$work/pc_${lang}_${kind}
    if [ "$kind" = static ] && ldd "$exe" | grep -q libmemlake; then
      echo "$exe: linked statically, yet it loads libmemlake.so" >&2
      exit 1
    fi
    "$exe" | grep "memlake consumer: ok"
  done
done
echo "-- the installed package works"
