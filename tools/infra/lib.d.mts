// Types of the infrastructure scripts' programmatic API (lib.mjs), for TypeScript callers
// such as benchmarks and test harnesses.
export interface StackHandle {
  brokers: string;
  url: string;
  env: { KAFKA_BROKERS: string; DATABASE_URL: string };
}
export function startStack(opts?: { fresh?: boolean; kafkaPort?: number; pgPort?: number }): Promise<StackHandle>;
export function stopStack(opts?: { kafkaPort?: number; pgPort?: number }): Promise<void>;
export function startKafka(opts?: {
  fresh?: boolean;
  port?: number;
  timeoutMs?: number;
}): Promise<{ brokers: string; port: number; pid: number; alreadyRunning: boolean; logFile: string }>;
export function stopKafka(opts?: { port?: number }): Promise<{ stopped: boolean }>;
export function startPostgres(opts?: {
  fresh?: boolean;
  port?: number;
}): Promise<{ url: string; port: number; dataDir: string; alreadyRunning: boolean }>;
export function stopPostgres(opts?: { port?: number }): Promise<{ stopped: boolean }>;
export function createDatabase(name: string, opts?: { port?: number }): Promise<string>;
export function runProducerPerf(args: string[], opts?: { port?: number; echo?: boolean }): Promise<{ code: number; output: string }>;
export function kafkaStatus(opts?: { port?: number }): { running: boolean; pid: number | null; brokers: string; stateDir: string };
export function postgresStatus(opts?: { port?: number }): { running: boolean; pid: number | null; url: string; dataDir: string };
