/**
 * Models a run configuration may name instead of a directory (`"model": "smollm2-135m"`): the
 * known models of `anvil model fetch`, imported on first use into <dataDir>/models/<name>.
 */
import { resolve } from 'node:path';
import { fetchModel, isFetched, KNOWN_MODELS, knownModel, modelDir } from '@anvil/model-import';

/** Whether `model` names a known model (not 'tiny', not a path). */
export const isKnownModelName = (model: string): boolean => !model.includes('/') && KNOWN_MODELS.some((k) => k.name === model);

/** Where a known model lives for a data directory, and whether it is there already. */
export function knownModelPlace(name: string, dataDir: string): { dir: string; fetched: boolean } {
  const dir = modelDir(name, resolve(dataDir));
  return { dir, fetched: isFetched(knownModel(name), dir) };
}

/** The known model's directory, fetched and imported first when it is not there. */
export async function ensureKnownModel(name: string, dataDir: string, log: (line: string) => void): Promise<string> {
  const place = knownModelPlace(name, dataDir);
  if (!place.fetched) log(`model: fetching ${name} (anvil model fetch ${name}) into ${place.dir} ...`);
  const r = await fetchModel(name, resolve(dataDir), { onProgress: (l) => log(`model: ${l}`) });
  return r.dir;
}
