#!/bin/sh
# Builds policy.wasm from policy.ts with the AssemblyScript compiler pinned in
# package-lock.json (installed by `npm ci` into node_modules here when
# missing). --runtime stub: no garbage collector (the guest allocates nothing
# per call); --use abort=: no env.abort import, an abort traps.
# Usage: build.sh [OUT]   (default: policy.wasm next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/policy.wasm}
cd "$here"
if [ ! -x node_modules/.bin/asc ]; then
	npm ci --no-audit --no-fund --loglevel=error >&2
fi
node_modules/.bin/asc policy.ts --runtime stub --use abort= -O3 \
	--outFile "$out"
