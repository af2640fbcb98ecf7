import { randomBytes } from 'node:crypto';
import { Client } from 'pg';

/** A database of a test's own on a real PostgreSQL server, dropped (with its connections) by drop(). */
export interface ScratchDatabase {
  name: string;
  /** The server URL with this database as its path. */
  url: string;
  drop(): Promise<void>;
}

/** Runs one statement on the server URL's database (CREATE/DROP DATABASE cannot run inside the database itself). */
export async function onServer(serverUrl: string, sql: string): Promise<void> {
  const client = new Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Creates `<prefix>_<random>` on the server, so a test starts from an empty schema that no other test writes to. */
export async function createScratchDatabase(serverUrl: string, prefix: string): Promise<ScratchDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await onServer(serverUrl, `CREATE DATABASE "${name}"`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { name, url: url.toString(), drop: () => onServer(serverUrl, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`) };
}
