#!/bin/bash
# Prepares .device/ (git-ignored) for a run on the GPU machine, which has a CUDA driver, nvcc and
# Python but no Node.js, no node_modules and no OpenBLAS: a compressed copy of this Node, the
# shared libraries the engine binaries need, and esbuild bundles of the GPU checks (engine and
# trainer) and of the engine-cuda benchmark. The engine binaries themselves are carried from their
# build folders.
# Usage: bash tools/device/prepare.sh   (after `npm run build:native` and `npm run build:cuda`)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.device
rm -rf "$out" && mkdir -p "$out/lib"
test -f libs/engine/build/Release/anvil_engine.node || { echo "build the CPU engine first (npm run build:native)"; exit 1; }
test -f libs/engine/build-cuda/anvil_engine_cuda.node || { echo "build the CUDA engine first (npm run build:cuda)"; exit 1; }
xz -T2 -6 -c "$(readlink -f "$(command -v node)")" > "$out/node.xz"
# the engine binaries' libraries that a CUDA image may lack (OpenBLAS and its Fortran runtime)
for so in $(ldd libs/engine/build/Release/anvil_engine.node | awk '/=>/ {print $3}' | grep -E 'openblas|gfortran|quadmath|gomp'); do
  xz -T2 -6 -c "$so" > "$out/lib/$(basename "$so").xz"
done
bundle() {
  npx esbuild "$1" --bundle --platform=node --target=node20 --format=cjs --log-level=warning \
    --tsconfig=tsconfig.base.json --outfile="$2"
}
bundle tools/device/cuda-check.ts "$out/cuda-check.js"
bundle tools/device/trainer-check.ts "$out/trainer-check.js"
bundle tools/bench/suites/engine-cuda.ts "$out/engine-cuda.js"
du -sh "$out" "$out"/* | sed 's/^/  /'
