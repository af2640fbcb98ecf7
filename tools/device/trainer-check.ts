// GPU-machine entry of the trainer's checks (trainer-checks.ts), bundled by prepare.sh like
// cuda-check.ts. Prints one line per check and a JSON summary last; exits 1 on any failure.
// ANVIL_CHECK_BACKEND=cpu runs them without a GPU (how trainer-checks.spec.ts tests them).
import { cudaAvailability, type Backend } from '@anvil/engine';
import { trainerChecks } from './trainer-checks';

async function main() {
  const device = (process.env.ANVIL_CHECK_BACKEND ?? 'cuda') as Backend;
  const avail = cudaAvailability();
  console.log(`CUDA backend: ${avail.available ? 'available' : 'NOT available'}: ${avail.reason}`);
  if (!avail.available && device === 'cuda') {
    console.log(JSON.stringify({ ran: false, reason: avail.reason }));
    process.exitCode = 1;
    return;
  }
  const results = await trainerChecks(device);
  for (const r of results) console.log(`${r.passed ? 'PASS' : 'FAIL'} ${r.name}: ${r.detail}`);
  const failed = results.filter((r) => !r.passed).length;
  console.log(`\n${results.length - failed} passed, ${failed} failed`);
  console.log(JSON.stringify({ ran: true, passed: results.length - failed, failed, results }));
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
