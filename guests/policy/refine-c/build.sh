#!/bin/sh
# Builds refine.wasm from refine.c with Debian's clang and lld (packages
# clang, lld). Freestanding: no libc or WASI sysroot is needed.
# Usage: build.sh [OUT]   (default: refine.wasm next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/refine.wasm}
CLANG=${CLANG:-clang}
cd "$here"
"$CLANG" --target=wasm32-unknown-unknown -O2 -nostdlib -ffreestanding \
	-mbulk-memory -fno-ident -Wall -Wextra -Werror \
	-Wl,--no-entry -Wl,--strip-all \
	-Wl,-z,stack-size=16384 -Wl,--initial-memory=131072 \
	-o "$out" refine.c
