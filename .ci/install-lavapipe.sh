#!/usr/bin/env bash
# Installs Mesa's software Vulkan (lavapipe) from bookworm-backports so WebGPU (Dawn, Deno, bun-webgpu)
# finds a real adapter on a machine without a GPU. Mesa 22 from bookworm main is too old for Dawn.
set -euo pipefail
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
  echo "lavapipe already installed"; exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
src=/etc/apt/sources.list.d/debian.sources
bp=/etc/apt/sources.list.d/bookworm-backports.sources
if [ ! -f "$bp" ]; then
  # Copy the main bookworm entry and point it at the backports suite.
  awk 'BEGIN{RS="";ORS="\n\n"} /Suites:[^\n]*bookworm( |$|\n)/ && !/security/' "$src" \
    | sed -E 's/^Suites:.*/Suites: bookworm-backports/' | $SUDO tee "$bp" >/dev/null
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
ls /usr/share/vulkan/icd.d/
