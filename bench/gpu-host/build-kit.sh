#!/usr/bin/env bash
# Builds the kit that bench/gpu-host/run.sh unpacks on a GPU host without Node or network, into .gpukit/
# (ignored by .gitignore; KIT=DIR for another folder): this machine's node and Dawn's dawn.node, xz-compressed,
# the Vulkan loader as a .deb (unpacked there only where the host has none), and the benchmarks bundled into
# one file each (bench/gpu-host/bundle.mjs). Needs x86-64 Linux, node_modules, and apt-get with network.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=${KIT:-.gpukit}
[[ $(uname -m) == x86_64 ]] || { echo "the GPU hosts are x86-64: build the kit on x86-64" >&2; exit 1; }
rm -rf "$KIT"
mkdir -p "$KIT/debs"
xz -T2 -c "$(command -v node)" >"$KIT/node.xz"
xz -T2 -c node_modules/webgpu/dist/linux-x64/dawn.node >"$KIT/dawn.node.xz"
node bench/gpu-host/bundle.mjs "$KIT/bundles"
# the amd64 package lists in a folder of their own, whatever this machine's own apt state
lists=$(mktemp -d)
mkdir -p "$lists/partial"
apt=(apt-get -qq -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
"${apt[@]}" update
(cd "$KIT/debs" && "${apt[@]}" download libvulkan1)
rm -rf "$lists"
ls -l "$KIT" "$KIT/debs" "$KIT/bundles"
du -sb "$KIT"
