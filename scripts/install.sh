#!/usr/bin/env bash
# Create .venv with ksbuild (editable) and what its tests need. torch is pinned to the CPU
# build (an unpinned torch would pull several GB of CUDA packages). The "blas" backend needs a
# CBLAS library: OpenBLAS from apt when it is missing (Debian/Ubuntu, as root); cross
# compilers and qemu-user likewise.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ldconfig -p | grep -q "libopenblas\.so\|libblas\.so "; then
    if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
        echo "install.sh: installing libopenblas-dev (for backend = \"blas\")"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev > /dev/null
    else
        echo "install.sh: WARNING: no BLAS found; install libopenblas-dev for backend = \"blas\" and its tests" >&2
    fi
fi
# Cross toolchains for --target (docs/shipping.md) and qemu-user to run their programs; the
# cross tests skip, naming what is missing, where they are not installed.
CROSS_PACKAGES="g++-aarch64-linux-gnu g++-riscv64-linux-gnu qemu-user gcc-arm-none-eabi libnewlib-arm-none-eabi
    libstdc++-arm-none-eabi-newlib"
if ! command -v aarch64-linux-gnu-g++ > /dev/null || ! command -v riscv64-linux-gnu-g++ > /dev/null \
        || ! command -v qemu-aarch64 > /dev/null || ! command -v arm-none-eabi-g++ > /dev/null \
        || ! echo '#include <cmath>' | arm-none-eabi-g++ -x c++ -fsyntax-only - 2> /dev/null; then
    if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
        echo "install.sh: installing cross toolchains and qemu-user (for --target)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $CROSS_PACKAGES > /dev/null \
            || echo "install.sh: WARNING: could not install all of: $CROSS_PACKAGES; cross tests will skip" >&2
    else
        echo "install.sh: WARNING: cross toolchains missing; install $CROSS_PACKAGES (apt) for --target" \
             "and its tests" >&2
    fi
fi
# apt_install WHY PACKAGE...: install packages with apt, without their recommends, when running as root on
# Debian/Ubuntu; otherwise say what is missing (the tests that need it skip, naming it).
apt_install() {
    local why=$1
    shift
    if command -v apt-get > /dev/null && [ "$(id -u)" = 0 ]; then
        echo "install.sh: installing $* ($why)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
            > /dev/null || echo "install.sh: WARNING: could not install $*; the tests that need it will skip" >&2
    else
        echo "install.sh: WARNING: $* missing; install it (apt) for $why and its tests" >&2
    fi
}
# qemu-system-arm runs a Cortex-M4 program on QEMU's mps2-an386 board (tests/test_baremetal_link.py); its
# recommends (a GUI, other boards' firmware) are not needed.
command -v qemu-system-arm > /dev/null || apt_install "running Cortex-M programs under QEMU" qemu-system-arm
# clang++: the generated C++ must build warning-free with it too (tests/test_clang.py).
command -v clang++ > /dev/null || apt_install "building with clang" clang
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test,torch,plot,wheel,examples,onnx]"
# backend = "ort" compiles against ONNX Runtime's C API header (onnxruntime_c_api.h and the headers it includes),
# which no Python wheel and no Debian package of this machine ships. The npm package com.github.asus4.onnxruntime
# (MIT; ONNX Runtime's own Apple framework repackaged for Unity) has them: fetched once (about 150 MB, of which the
# headers are kept) into .venv/include/onnxruntime, where ksbuild looks (or set KSBUILD_ORT_INCLUDE).
ORT_NPM="com.github.asus4.onnxruntime@0.4.9"
ORT_INCLUDE=.venv/include/onnxruntime
if [ ! -f "$ORT_INCLUDE/onnxruntime_c_api.h" ]; then
    if command -v npm > /dev/null; then
        echo "install.sh: fetching ONNX Runtime's C API headers ($ORT_NPM, npm) for backend = \"ort\""
        ort_tmp=$(mktemp -d)
        if (cd "$ort_tmp" && npm pack --silent "$ORT_NPM" > /dev/null && tar -xzf ./*.tgz --wildcards \
                '*ios-arm64_x86_64-simulator/onnxruntime.framework/Headers/*.h'); then
            mkdir -p "$ORT_INCLUDE"
            cp "$ort_tmp"/package/Plugins/*/onnxruntime.xcframework/ios-arm64_x86_64-simulator/onnxruntime.framework/Headers/*.h \
                "$ORT_INCLUDE"/
        else
            echo "install.sh: WARNING: could not fetch $ORT_NPM; the ort backend's tests will skip" >&2
        fi
        rm -rf "$ort_tmp"
    else
        echo "install.sh: WARNING: npm missing; the ort backend needs ONNX Runtime's C API headers (see" \
             "docs/backends.md) and its tests will skip" >&2
    fi
fi
