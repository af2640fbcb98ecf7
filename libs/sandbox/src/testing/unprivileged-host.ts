// A host that is not root, for the test of the local backend without uid switching: runs one
// sandbox on the workspace argv[2] and prints its result as JSON.
import { LocalSandbox } from '../local/local-backend';

const quiet = { info: () => undefined, warn: () => undefined };

void (async () => {
  const backend = await LocalSandbox.create({ logger: quiet });
  const ws = process.argv[2];
  const r = await backend.run({
    label: 'unprivileged',
    workspace: ws,
    limits: { wallMs: 20_000 },
    argv: ['sh', '-c', `id -u; touch ${ws}/made; echo $$`],
  });
  console.log(JSON.stringify(r));
})().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
