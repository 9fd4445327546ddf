#!/bin/sh
# Builds the hostile guest fixtures (*.wat -> *.wasm) with wabt's wat2wasm.
# Usage: build.sh [OUTDIR]   (default: this directory)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
for f in "$here"/*.wat; do
	n=$(basename "$f" .wat)
	wat2wasm --enable-all -o "$out/$n.wasm" "$f"
done
