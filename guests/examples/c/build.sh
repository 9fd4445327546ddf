#!/bin/sh
# Builds policy.wasm from policy.c with Debian's clang and lld (packages
# clang, lld; the committed module was built by clang 14.0.6).
# Freestanding: no libc or WASI sysroot is needed.
# Usage: build.sh [OUT]   (default: policy.wasm next to this script)
#
# clang -O2 runs binaryen's wasm-opt after linking when it finds one on PATH,
# and the output would then depend on what the machine happens to have. The
# compile and the link are therefore separate steps: clang -c never runs
# wasm-opt, and wasm-ld is called directly.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/policy.wasm}
CLANG=${CLANG:-clang}
WASM_LD=${WASM_LD:-wasm-ld}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
"$CLANG" --target=wasm32-unknown-unknown -O2 -nostdlib -ffreestanding \
	-fno-ident -Wall -Wextra -Werror -c -o "$tmp/policy.o" policy.c
"$WASM_LD" --no-entry --strip-all -z stack-size=16384 --initial-memory=131072 \
	-o "$out" "$tmp/policy.o"
