// GPU-machine entry of the CUDA checks (libs/engine/src/cuda-checks.ts): the GPU machine has no
// node_modules, so tools/device/prepare.sh bundles this file with esbuild and run-gpu.sh runs it
// with a carried Node. Prints one line per check and a JSON summary last; exits 1 on any failure.
import { cudaAvailability, engineInfo, kernelChecks, modelChecks } from '@anvil/engine';

async function main() {
  const avail = cudaAvailability();
  console.log(`CUDA backend: ${avail.available ? 'available' : 'NOT available'}: ${avail.reason}`);
  console.log(`default selection: ${JSON.stringify(engineInfo().reason)}`);
  if (!avail.available) {
    console.log(JSON.stringify({ ran: false, reason: avail.reason }));
    process.exitCode = 1;
    return;
  }
  const results: Array<{ kind: string; name: string; passed: boolean; detail: string }> = [];
  const t0 = performance.now();
  try {
    for (const k of await kernelChecks(1)) {
      results.push({
        kind: 'kernel',
        name: k.name,
        passed: k.passed,
        detail: `maxAbsErr ${k.maxAbsErr.toExponential(2)} maxRef ${k.maxRef.toExponential(2)} atol ${k.atol} rtol ${k.rtol} failures ${k.failures} ${k.detail}`,
      });
      console.log(`${k.passed ? 'PASS' : 'FAIL'} kernel ${results[results.length - 1].name}: ${results[results.length - 1].detail}`);
    }
  } catch (e) {
    results.push({ kind: 'kernel', name: 'checkKernels', passed: false, detail: (e as Error).message });
    console.log(`FAIL kernel checks threw: ${(e as Error).message}`);
  }
  const t1 = performance.now();
  try {
    for (const c of await modelChecks()) {
      results.push({ kind: 'model', name: c.name, passed: c.passed, detail: c.detail });
      console.log(`${c.passed ? 'PASS' : 'FAIL'} model ${c.name}: ${c.detail}`);
    }
  } catch (e) {
    results.push({ kind: 'model', name: 'modelChecks', passed: false, detail: (e as Error).stack ?? String(e) });
    console.log(`FAIL model checks threw: ${(e as Error).stack}`);
  }
  const failed = results.filter((r) => !r.passed);
  console.log(
    `\n${results.length - failed.length} passed, ${failed.length} failed (kernels ${((t1 - t0) / 1e3).toFixed(1)} s, model ${((performance.now() - t1) / 1e3).toFixed(1)} s)`,
  );
  console.log(JSON.stringify({ ran: true, passed: results.length - failed.length, failed: failed.length, results }));
  // exitCode, not process.exit(): exiting at once cut the piped output at 64 KiB mid-JSON
  process.exitCode = failed.length ? 1 : 0;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
