/**
 * `npm run stack -- up|down|status`: the distributed run (README "The distributed run").
 *
 *   npm run stack -- up [--config run.json] [--keep-services] [--no-build] [--brokers HOST:PORT --database postgres://...]
 *   npm run stack -- status
 *   npm run stack -- down [--keep-infra]
 */
import { down } from './down';
import { status } from './status';
import { up } from './up';

const USAGE =
  'usage: npm run stack -- up [--config run.json] [--keep-services] [--no-build] [--brokers LIST --database URL] | status | down [--keep-infra]';

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === 'up') return up(rest);
  if (cmd === 'down') return down(rest);
  if (cmd === 'status') return status(rest);
  console.error(USAGE);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    process.exit(1);
  },
);
