#!/usr/bin/env bash
# The benchmark run for a GPU host without Node (docs: ../../shared/gpu/README.md beside the checkout): unpacks
# the kit that bench/gpu-host/build-kit.sh made (node, dawn.node, the Vulkan loader, the bundled benchmarks),
# then runs the PyTorch baselines, the WebGPU benchmarks and the CPU engine benchmarks one after another, each
# under its own timeout, all output into one log; a failing step never stops the others; a summary at the end.
# Usage, from the repository root: OUT=DIR bash bench/gpu-host/run.sh
#   KIT (default .gpukit): the kit folder; BUDGET (default 400): seconds for all steps together, each step's
#   timeout is cut to what is left and a step is skipped under 15 s left; PYTHON (default python3).
set -u
cd "$(dirname "$0")/../.."
KIT=$(realpath -m "${KIT:-.gpukit}")
OUT=${OUT:-/tmp/gpukit-out}
BUDGET=${BUDGET:-400}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/bench.log
WORK=$(mktemp -d /tmp/gpukit.XXXXXX)
export PYTHONUNBUFFERED=1

SUMMARY=()
START=$SECONDS

# step NAME SECONDS COMMAND...: runs COMMAND under `timeout`, cut to what is left of BUDGET, and records how it ended.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if ((left < 15)); then
    echo -e "\n=== $name: skipped, ${left}s of the budget left"
    SUMMARY+=("$name|skipped|0")
    return
  fi
  ((limit > left)) && limit=$left
  echo -e "\n=== $name (timeout ${limit}s): $*"
  local t0=$SECONDS rc status
  timeout -k 5 "$limit" "$@" </dev/null
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status="timeout ${limit}s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  SUMMARY+=("$name|$status|$((SECONDS - t0))")
}

# unxz_to FILE.xz DEST: with xz, or Python's lzma where the host has no xz.
unxz_to() {
  if command -v xz >/dev/null; then
    xz -dc "$1" >"$2"
  else
    "$PYTHON" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
}

setup() {
  echo "=== setup in $WORK"
  if [[ ! -f $KIT/node.xz ]]; then
    echo "no kit at $KIT: run bench/gpu-host/build-kit.sh first"
    return 1
  fi
  unxz_to "$KIT/node.xz" "$WORK/node" && chmod +x "$WORK/node"
  unxz_to "$KIT/dawn.node.xz" "$WORK/dawn.node"
  NODE=$WORK/node
  export LIGHTNING_DAWN_NODE=$WORK/dawn.node
  # the Vulkan loader, only where the host has none (unpacked into /, as the device README says)
  if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
    echo "no libvulkan.so.1: unpacking $KIT/debs/*.deb into /"
    for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  echo "--- nvidia-smi -L"
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1; else echo "(no nvidia-smi)"; fi
  echo "--- node $("$NODE" --version)"
  echo "--- $PYTHON: $("$PYTHON" -c 'import sys; print(sys.version.split()[0])' 2>&1); torch: $("$PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  local adapter
  adapter=$(probe_adapter)
  # the NVIDIA driver's ICD file, where the loader does not find it by itself (or finds only a software one)
  if [[ $adapter == none* || $adapter == *software* ]]; then
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
      [[ -f $icd ]] || continue
      echo "adapter was: $adapter; trying VK_DRIVER_FILES=$icd"
      export VK_DRIVER_FILES=$icd
      [[ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ]] &&
        export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
      adapter=$(probe_adapter)
      break
    done
  fi
  echo "--- WebGPU adapter: $adapter"
  if [[ $adapter == none* || $adapter == *software* ]]; then
    echo "--- Vulkan ICD files here:"
    ls /usr/local/nvidia/share/vulkan/icd.d /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>&1
  fi
  return 0
}

# The adapter Dawn offers, straight from dawn.node (no bundle needed): "vendor architecture device (description)".
probe_adapter() {
  timeout 60 "$NODE" -e '
    const { create, globals } = require(process.env.LIGHTNING_DAWN_NODE);
    Object.assign(globalThis, globals);
    create([]).requestAdapter({ powerPreference: "high-performance" }).then((a) => {
      if (!a) console.log("none");
      else {
        const i = a.info;
        const soft = /llvmpipe|lavapipe|swiftshader|software/i.test(`${i.device} ${i.description}`);
        console.log(`${i.vendor} ${i.architecture} ${i.device} (${i.description})${soft ? " software" : ""}`);
      }
      process.exit(0);
    }, (e) => { console.log(`none: ${e.message}`); process.exit(0); });
  ' 2>&1 | grep -v '^Warning: ' | tail -1
}

summary() {
  echo -e "\n=== summary ($((SECONDS - START))s of a ${BUDGET}s budget)"
  printf '| %-34s | %-20s | %7s |\n' step status seconds
  printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "$(printf -- '-%.0s' {1..22})" "$(printf -- '-%.0s' {1..8}):"
  local row name status secs
  for row in "${SUMMARY[@]}"; do
    IFS='|' read -r name status secs <<<"$row"
    printf '| %-34s | %-20s | %7s |\n' "$name" "$status" "$secs"
  done
  echo -e "\n=== figures (the benchmarks' own result lines)"
  grep -aE '^(adapter|webgpu adapter|hf )|tokens/s|tok/s|GFLOP/s|GB/s|bytes/param|^│ ' "$LOG" | grep -av '^===' | head -200
}

main() {
  if ! setup; then
    SUMMARY+=("setup|failed|0")
    summary
    return
  fi
  local B=$KIT/bundles
  # PyTorch baselines first: they are quick and the WebGPU figures are read against them
  step "torch policy_step tiny,small,base" 60 "$PYTHON" bench/torch/policy_step.py --preset all --steps 10
  step "webgpu gpu.ts --base" 120 "$NODE" "$B/gpu.mjs" --base
  step "torch lora_step n4 P128 R128" 60 "$PYTHON" bench/torch/lora_step.py --n 4 --P 128 --R 128 --steps 3
  step "webgpu lora.ts n4 P128 R128" 90 "$NODE" "$B/lora.mjs" --no-cpu --n 4 --P 128 --R 128 --steps 3
  step "torch hf_generate p128 d32" 60 "$PYTHON" bench/torch/hf_generate.py --prompt 128 --decode 32
  step "hf.ts p128 d32 (cpu + webgpu)" 90 "$NODE" "$B/hf.mjs" --prompt 128 --decode 32 --dir "$WORK/hf"
  step "generate.ts --base (cpu + webgpu)" 60 "$NODE" "$B/generate.mjs" --base
  # CPU engine: the benches take no thread flag and use every CPU this process may run on, so `taskset` sets
  # the thread count; each run also has its own 1-thread column
  local all
  all=$(nproc)
  step "cpu-engine.ts threads=$all" 90 "$NODE" "$B/cpu-engine.mjs"
  step "cpu.ts threads=$all" 90 "$NODE" "$B/cpu.mjs"
  step "lora.ts defaults (cpu + webgpu)" 60 "$NODE" "$B/lora.mjs"
  for t in 8 4; do
    ((t < all)) && step "cpu-engine.ts threads=$t" 60 taskset -c "0-$((t - 1))" "$NODE" "$B/cpu-engine.mjs"
  done
  summary
}

main 2>&1 | tee "$LOG"
rm -rf "$WORK"
