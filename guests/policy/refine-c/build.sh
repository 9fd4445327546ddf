#!/bin/sh
# Builds refine.wasm from refine.c with Debian's clang and lld (packages
# clang, lld). Freestanding: no libc or WASI sysroot is needed.
# Usage: build.sh [OUT]   (default: refine.wasm next to this script)
#
# clang -O2 runs binaryen's wasm-opt after linking when it finds one on PATH
# (and that wasm-opt may reject the bulk-memory module), so the compile and
# the link are separate steps: clang -c never runs wasm-opt, and wasm-ld is
# called directly.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/refine.wasm}
CLANG=${CLANG:-clang}
WASM_LD=${WASM_LD:-wasm-ld}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
"$CLANG" --target=wasm32-unknown-unknown -O2 -nostdlib -ffreestanding \
	-mbulk-memory -fno-ident -Wall -Wextra -Werror -c -o "$tmp/refine.o" refine.c
"$WASM_LD" --no-entry --strip-all -z stack-size=16384 --initial-memory=131072 \
	-o "$out" "$tmp/refine.o"
