#!/usr/bin/env bash
# install_deps.sh - the Debian packages lizard builds and tests with (run as root). --list: print
# the packages, one a line, and install nothing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(build-essential cmake pkg-config ca-certificates iproute2 util-linux
          libjansson-dev libpcre2-dev protobuf-c-compiler libprotobuf-c-dev libmicrohttpd-dev nettle-dev
          libopenblas-dev
          curl clang libclang-rt-14-dev libopenmpi-dev openmpi-bin python3)
# Node + npm for the OpenAI client test: Debian's, unless a Node that brings its own npm is there
# (NodeSource's nodejs conflicts with Debian's npm package)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
if [ "${1:-}" = --list ]; then printf '%s\n' "${packages[@]}"; exit 0; fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "install_deps: done"
