#!/bin/bash
# Runs on the GPU machine (see prepare.sh): the kernel and model checks, the trainer's checks
# (trainer-check.ts), then the engine-cuda benchmark. Logs go to $OUT (the device tool's result folder) when it is set.
# Usage: bash tools/device/run-gpu.sh [checks|bench|all]
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${OUT:-/tmp/anvil-gpu-out}
mkdir -p "$out" /tmp/anvil-node
test -x /tmp/anvil-node/node || python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open('.device/node.xz'), open('/tmp/anvil-node/node','wb'))"
chmod +x /tmp/anvil-node/node
mkdir -p /tmp/anvil-lib
for f in .device/lib/*.xz; do n=/tmp/anvil-lib/$(basename "$f" .xz); test -f "$n" || python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$f" "$n"; done
export PATH=/tmp/anvil-node:$PATH LD_LIBRARY_PATH=/tmp/anvil-lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
node --version
rc=0
if [ "$what" = checks ] || [ "$what" = all ]; then
  node .device/cuda-check.js 2>&1 | tee "$out/checks.log"; rc=${PIPESTATUS[0]}
  node .device/trainer-check.js 2>&1 | tee "$out/trainer-checks.log"; trc=${PIPESTATUS[0]}; [ $trc -ne 0 ] && rc=$trc
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  # benchmark the FA2 attention kernels only if none of their checks failed in this run
  impl=""
  if [ -f "$out/checks.log" ] && ! node -e "
    const last = require('fs').readFileSync(process.argv[1], 'utf8').trim().split('\n').pop();
    const j = JSON.parse(last);
    process.exit(j.results && !j.results.some((r) => !r.passed && /fa2/.test(r.name)) ? 0 : 1);" "$out/checks.log"; then
    impl=wmma
    echo "FA2 attention failed a check (or the checks did not finish): benchmarking with ANVIL_ATTENTION_IMPL=wmma"
  fi
  ANVIL_ATTENTION_IMPL=$impl node .device/engine-cuda.js 2>&1 | tee "$out/bench.log"; brc=${PIPESTATUS[0]}; [ $brc -ne 0 ] && rc=$brc
fi
exit $rc
