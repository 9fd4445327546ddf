#!/bin/sh
# Builds policy.wasm from policy.rs and the SDK in sdk/rust with Debian's
# rustc and its wasm32 standard library (packages rustc,
# libstd-rust-dev-wasm32; the committed module was built by rustc 1.63.0).
# No cargo. Uses $RUSTC if set, else /usr/bin/rustc when present (so a
# rustup rustc earlier on PATH, which may lack the wasm32 target, is not
# picked up), else rustc from PATH.
# Usage: build.sh [OUT]   (default: policy.wasm next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$here/policy.wasm}
if [ -z "${RUSTC:-}" ]; then
	if [ -x /usr/bin/rustc ]; then RUSTC=/usr/bin/rustc; else RUSTC=rustc; fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Paths are relative to the repository and temporary ones are remapped, so
# the module does not depend on where it was built.
cd "$root"
flags="--edition 2021 --target wasm32-unknown-unknown -C opt-level=s -C panic=abort
	-C debuginfo=0 --remap-path-prefix=$tmp=/build"
# shellcheck disable=SC2086
env -u RUSTFLAGS -u RUSTUP_TOOLCHAIN "$RUSTC" $flags --crate-type rlib --crate-name agenthost_guest \
	-o "$tmp/libagenthost_guest.rlib" sdk/rust/src/lib.rs
# shellcheck disable=SC2086
env -u RUSTFLAGS -u RUSTUP_TOOLCHAIN "$RUSTC" $flags --crate-type cdylib --crate-name example_rust \
	-C lto -C strip=symbols -C link-arg=--strip-all \
	--extern agenthost_guest="$tmp/libagenthost_guest.rlib" -o "$out" guests/examples/rust/policy.rs
