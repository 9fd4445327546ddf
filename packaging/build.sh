#!/usr/bin/env bash
# Builds what the container image holds into OUT (default ./bin/image):
#   OUT/agenthost                    the server and client, with the built-in
#                                    store drivers (memstore, badgerstore,
#                                    pgstore) inside the same binary
#   OUT/guests/<name>.wasm           the standard wasm guests (policies and
#                                    prepareStep hooks)
# The Dockerfile's build stage runs exactly this; packaging_test.go runs it
# too, so the image's build steps are tested without a container engine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bin/image}
GO=${GO:-go}
mkdir -p "$OUT/guests"
ldflags="-s -w"
"$GO" build -ldflags "$ldflags" -o "$OUT/agenthost" ./cmd/agenthost
for g in queue interrupt reject inject refine step-budget system-instruction; do
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 "$GO" build -buildmode=c-shared -o "$OUT/guests/$g.wasm" "./guests/policy/$g"
done
cp guests/policy/refine-c/refine.wasm "$OUT/guests/refine-c.wasm"
echo "built $OUT/agenthost and $(ls "$OUT/guests" | wc -l) guests"
