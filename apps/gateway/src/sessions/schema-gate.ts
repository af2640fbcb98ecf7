import type { DataSource } from 'typeorm';
import { runMigrations } from '@anvil/persistence';
import type { Logger } from '@anvil/observability';
import { retryDelayMs } from '@anvil/service-kit';

export const SCHEMA_GATE = Symbol('SCHEMA_GATE');

/**
 * The database connection and the gateway's tables. With DB_MIGRATE_ON_START the committed
 * migrations are applied (under the shared advisory lock, so services starting together take
 * turns). Started in the background: the service answers /healthz meanwhile and /readyz says
 * why it is not ready.
 */
export class SchemaGate {
  private readonly done: Promise<void>;
  private ok = false;

  constructor(ds: DataSource, migrate: boolean, logger: Logger) {
    this.done = (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          if (!ds.isInitialized) await ds.initialize();
          if (migrate) {
            const applied = await runMigrations(ds);
            if (applied.length) logger.info('migrations applied', { applied });
          }
          this.ok = true;
          return;
        } catch (err) {
          logger.warn('database not ready yet; retrying', { attempt, err });
          await new Promise((r) => setTimeout(r, retryDelayMs(attempt)));
        }
      }
    })();
  }

  get isReady(): boolean {
    return this.ok;
  }

  ready(): Promise<void> {
    return this.done;
  }
}
