#!/usr/bin/env bash
# install_deps.sh - the Debian packages lizard builds and tests with (run as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config ca-certificates \
    libjansson-dev libpcre2-dev protobuf-c-compiler libprotobuf-c-dev libmicrohttpd-dev \
    curl nodejs npm \
    clang libclang-rt-14-dev \
    libopenmpi-dev openmpi-bin \
    python3 >/dev/null
echo "install_deps: done"
