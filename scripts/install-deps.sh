#!/usr/bin/env bash
# Installs what latte needs to build and test, from Debian 12's packages only.
# Skips apt entirely when everything is already there.
set -euo pipefail
packages=(cmake g++ make pkg-config libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev
          libbenchmark-dev libomp-dev libpcre2-dev
          libboost-dev curl  # Boost.Beast/Asio (header-only) for latte serve; curl for the quickstart
          ocl-icd-opencl-dev  # Debian's dnnl-config.cmake finds OpenCL; libdnnl-dev only recommends it
          clang-format  # scripts/check-format.sh, which test.sh runs before the build
          openmpi-bin libopenmpi-dev)  # mpirun -np N latte ... --tp N (src/dist)
# Node.js runs the reference tokenizer and template engine in tests (tests/npm/);
# the machines ship one, Debian's packages are the fallback.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
