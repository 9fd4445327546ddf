#!/bin/sh
# Builds the five example guests into OUT/example-<language>.wasm (`make
# guests`). A language whose toolchain is missing is skipped with a note,
# unless AGENTHOST_REQUIRE_ALL is set; then it is an error.
# Usage: build.sh OUT
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
GO=${GO:-go}
missing() {
	if [ -n "${AGENTHOST_REQUIRE_ALL:-}" ]; then
		echo "example $1: $2" >&2
		exit 1
	fi
	echo "example $1: skipped ($2)"
}
echo "example go"
(cd "$here/go" && GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 "$GO" build -buildmode=c-shared -o "$out/example-go.wasm" .)
if command -v clang >/dev/null && command -v wasm-ld >/dev/null; then
	echo "example c"; sh "$here/c/build.sh" "$out/example-c.wasm"
else missing c "needs clang and wasm-ld: Debian packages clang, lld"; fi
if [ -x /usr/bin/rustc ] || command -v rustc >/dev/null; then
	echo "example rust"; sh "$here/rust/build.sh" "$out/example-rust.wasm"
else missing rust "needs rustc: Debian packages rustc, libstd-rust-dev-wasm32"; fi
if command -v npm >/dev/null; then
	echo "example assemblyscript"; sh "$here/assemblyscript/build.sh" "$out/example-assemblyscript.wasm"
else missing assemblyscript "needs node and npm"; fi
if command -v wat2wasm >/dev/null; then
	echo "example wat"; sh "$here/wat/build.sh" "$out/example-wat.wasm"
else missing wat "needs wat2wasm: Debian package wabt"; fi
