#!/usr/bin/env bash
# The Rust client (clients/rust) builds offline from Debian's packaged crates: installs the
# librust-*-dev packages it needs (under /usr/share/cargo/registry), protoc, and Debian's
# cargo when no cargo is on the PATH. Run by .ci/run; the Rust tests (tests/rust) fail under
# CI=true without them. The three rustls packages serve the crate's default `tls` feature.
# See docs/rust-client.md.
set -euo pipefail
PACKAGES=(librust-tokio-dev librust-h2-dev librust-http-dev librust-bytes-dev librust-prost-dev
          librust-prost-types-dev librust-prost-build-dev librust-uuid-dev librust-thiserror-dev
          librust-serde-json-dev protobuf-compiler libprotobuf-dev
          librust-rustls-dev librust-tokio-rustls-dev librust-rustls-pemfile-dev)
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || PACKAGES+=(cargo)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
echo "ensure-rust: installed ${missing[*]}"
