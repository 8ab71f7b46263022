#!/usr/bin/env bash
# Installs what `tinker deploy check-arm` needs: the qemu user-mode emulator for aarch64 and the arm64
# architecture in dpkg (so `apt-get download` can fetch arm64 packages for the emulated sysroot).
# Idempotent; when apt is unreachable it says so and exits 0, and the ARM tests then skip with a reason.
set -u
if command -v qemu-aarch64-static >/dev/null 2>&1 && dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup-arm: qemu-aarch64-static and the arm64 dpkg architecture are already present"
    exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo -n"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-arm: no apt-get here; install qemu-user-static by hand to run the ARM checks" >&2
    exit 0
fi
dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 || true
if ! timeout 300 $SUDO apt-get update -qq; then
    echo "setup-arm: apt-get update failed (no network?); the ARM checks will be skipped" >&2
    exit 0
fi
if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
    timeout 600 env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends qemu-user-static \
        || echo "setup-arm: could not install qemu-user-static; the ARM checks will be skipped" >&2
fi
command -v qemu-aarch64-static >/dev/null 2>&1 && echo "setup-arm: $(qemu-aarch64-static --version | head -1)"
exit 0
