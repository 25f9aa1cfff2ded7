#!/usr/bin/env bash
# Installs every Debian package tbfs needs to build, test and run.
# Idempotent: apt-get skips what is already installed. Run as root on Debian 12.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake ninja-build ccache pkg-config git attr clang-16
  dpkg-dev man-db systemd lintian acl libcap2-bin
  libfuse3-dev fuse3
  librocksdb-dev
  libzstd-dev zstd zlib1g-dev gzip pigz python3
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libcli11-dev libxxhash-dev libyaml-cpp-dev libisal-dev nlohmann-json3-dev libarchive-dev
  prometheus-cpp-dev
  librados-dev libradospp-dev
  libmount-dev libsystemd-dev
  prometheus
  libabsl-dev
  libjemalloc-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
