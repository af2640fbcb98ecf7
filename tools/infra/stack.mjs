#!/usr/bin/env node
// Local stack = Kafka + PostgreSQL (see lib.mjs for the programmatic API).
//
//   node tools/infra/stack.mjs up [--fresh]   start both (idempotent); prints the env to use on stdout:
//                                             KAFKA_BROKERS=127.0.0.1:19092
//                                             DATABASE_URL=postgres://anvil@127.0.0.1:15432/anvil
//   node tools/infra/stack.mjs down           stop both
//   node tools/infra/stack.mjs status         one line each; exit 0 when both run, 3 otherwise
//   node tools/infra/stack.mjs env            print the env lines without starting anything
//
// e.g.  eval "$(node tools/infra/stack.mjs up --fresh | sed 's/^/export /')"
import { kafkaBrokers, kafkaStatus, postgresStatus, postgresUrl, startStack, stopStack } from './lib.mjs';
import { isMain, parseArgs } from './util.mjs';

async function main(argv) {
  const { positional, flags } = parseArgs(argv);
  switch (positional[0]) {
    case 'up': {
      const { env } = await startStack({ fresh: Boolean(flags.fresh) });
      for (const [k, v] of Object.entries(env)) console.log(`${k}=${v}`);
      return 0;
    }
    case 'down':
      await stopStack();
      return 0;
    case 'status': {
      const k = kafkaStatus();
      const p = postgresStatus();
      console.log(`kafka:    ${k.running ? `running pid ${k.pid}` : 'stopped'} ${k.brokers}`);
      console.log(`postgres: ${p.running ? `running pid ${p.pid}` : 'stopped'} ${p.url}`);
      return k.running && p.running ? 0 : 3;
    }
    case 'env':
      console.log(`KAFKA_BROKERS=${kafkaBrokers()}`);
      console.log(`DATABASE_URL=${postgresUrl()}`);
      return 0;
    default:
      console.error('usage: node tools/infra/stack.mjs up [--fresh]|down|status|env');
      return 2;
  }
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`[stack] ${e.message}`);
      process.exit(1);
    },
  );
}
