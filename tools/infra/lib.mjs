// Programmatic API of the local infrastructure (Kafka + PostgreSQL) for Node scripts: the test
// runner (tools/test/run-all.mjs), benches, e2e harnesses. Plain ESM, Node built-ins only.
//
//   import { startKafka, stopKafka, startPostgres, stopPostgres, startStack, stopStack } from './tools/infra/lib.mjs';
//
//   const { brokers } = await startKafka({ fresh: true });   // '127.0.0.1:19092' (KAFKA_PORT overrides)
//   const { url } = await startPostgres({ fresh: true });     // 'postgres://anvil@127.0.0.1:15432/anvil' (PG_PORT)
//   const otherUrl = await createDatabase('anvil_e2e');       // idempotent, server must be running
//   const { env } = await startStack({ fresh: true });       // { KAFKA_BROKERS, DATABASE_URL } (both started in parallel)
//   await stopKafka(); await stopPostgres();                  // or: await stopStack()
//
// Semantics shared by both servers:
//   - start* is idempotent and safe to call concurrently from several processes (a lock file per
//     port serialises them); when the server already runs it returns { ..., alreadyRunning: true }
//     and `fresh` is ignored (a running server is never wiped; stop it first).
//   - fresh: true wipes the server's data before starting it (new Kafka cluster id / new initdb).
//   - stop* returns { stopped: false } when nothing was running.
//   - The servers run detached: they outlive the calling process until stop* is called.
//   - All progress goes to stderr (silence with ANVIL_INFRA_QUIET=1); failures throw with a log tail.
// See kafka.mjs and postgres.mjs for every option, env var and file location.
import { startKafka, stopKafka } from './kafka.mjs';
import { startPostgres, stopPostgres } from './postgres.mjs';

export { installKafka, startKafka, stopKafka, kafkaStatus, kafkaBrokers, runProducerPerf, KAFKA_VERSION } from './kafka.mjs';
export { installPostgres, startPostgres, stopPostgres, postgresStatus, postgresUrl, createDatabase } from './postgres.mjs';

/**
 * Starts Kafka and PostgreSQL (in parallel). Returns
 * { brokers, url, env: { KAFKA_BROKERS, DATABASE_URL }, kafka, postgres }.
 */
export async function startStack({ fresh = false, kafkaPort, pgPort } = {}) {
  const [kafka, postgres] = await Promise.all([startKafka({ fresh, port: kafkaPort }), startPostgres({ fresh, port: pgPort })]);
  return {
    brokers: kafka.brokers,
    url: postgres.url,
    env: { KAFKA_BROKERS: kafka.brokers, DATABASE_URL: postgres.url },
    kafka,
    postgres,
  };
}

/** Stops both (in parallel); returns { kafka: {stopped}, postgres: {stopped} }. */
export async function stopStack({ kafkaPort, pgPort } = {}) {
  const [kafka, postgres] = await Promise.all([stopKafka({ port: kafkaPort }), stopPostgres({ port: pgPort })]);
  return { kafka, postgres };
}
