import { Injectable } from '@nestjs/common';

export interface ReadinessCheck {
  name: string;
  /** Resolves when the dependency is usable; rejects (or times out) when it is not. */
  check(): Promise<unknown>;
}

export interface ReadinessReport {
  ready: boolean;
  checks: Record<string, { ok: boolean; ms: number; error?: string }>;
}

/**
 * Dependencies register here (Kafka, PostgreSQL, inference backends). /readyz runs every
 * check in parallel with a deadline; a draining service reports not-ready so a load
 * balancer stops routing to it before it closes its connections.
 */
@Injectable()
export class ReadinessRegistry {
  private readonly checks = new Map<string, ReadinessCheck>();
  private draining = false;

  add(check: ReadinessCheck): void {
    this.checks.set(check.name, check);
  }

  markDraining(): void {
    this.draining = true;
  }

  async evaluate(timeoutMs = 2_000): Promise<ReadinessReport> {
    const entries = await Promise.all(
      [...this.checks.values()].map(async (c) => {
        const started = Date.now();
        try {
          await withTimeout(c.check(), timeoutMs, `${c.name} did not answer within ${timeoutMs} ms`);
          return [c.name, { ok: true, ms: Date.now() - started }] as const;
        } catch (err) {
          return [c.name, { ok: false, ms: Date.now() - started, error: (err as Error).message }] as const;
        }
      }),
    );
    const checks: ReadinessReport['checks'] = Object.fromEntries(entries);
    if (this.draining) checks.shutdown = { ok: false, ms: 0, error: 'draining for shutdown' };
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  }
}

export function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
