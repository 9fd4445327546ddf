#!/bin/sh
# Builds policy.wasm from policy.wat with wabt's wat2wasm (Debian package
# wabt; the committed module was built by wat2wasm 1.0.32).
# Usage: build.sh [OUT]   (default: policy.wasm next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/policy.wasm}
WAT2WASM=${WAT2WASM:-wat2wasm}
"$WAT2WASM" -o "$out" "$here/policy.wat"
