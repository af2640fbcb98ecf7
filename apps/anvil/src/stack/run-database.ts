/**
 * A fresh PostgreSQL database per run on the given server: the services' tables (the gateway's
 * sessions, the rollout-manager's queue, the Data Pool's trajectories and batches) start empty, a
 * later run never recovers an earlier run's queued work, and a finished run's data stays there to
 * query until the server is wiped.
 */
import { Client } from 'pg';

/** A database name for a run id: lowercase letters, digits and underscores, at most 63 bytes (PostgreSQL's limit). */
export function runDatabaseName(runId: string): string {
  return `anvil_${runId.toLowerCase().replace(/[^a-z0-9]+/g, '_')}`.slice(0, 63);
}

/** Creates `name` on the server `serverUrl` points at and returns the URL of the new database. */
export async function createRunDatabase(serverUrl: string, name: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`not a database name: ${name}`);
  const client = new Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** The URL without its password, for logs and the state file. */
export function withoutPassword(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  if (url.password) url.password = '***';
  return url.toString();
}
