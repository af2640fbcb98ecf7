/**
 * The built-in repo-fix task generator: seeded, like chain-add's. A task is a language, a
 * difficulty level and the catalog functions its module holds, some with a seeded bug:
 *
 *   level 1  one function, one bug; the statement names the function and its file, and a
 *            visible test shows the failing case
 *   level 2  three functions, one of them broken; the statement gives the failing call only
 *   level 3  three functions, two of them broken; the statement gives both failing calls
 *
 * Splits hold out whole bugs: a bug is an eval bug by a hash of its id, and a task is eval when
 * every bug in it is, train when none is (tasks mixing both are never made), so no eval bug is
 * ever seen in training, in either language or at any level.
 */
import { seededRandom } from '@anvil/rl';
import type { EnvTask, Split } from '../../types';
import { CATALOG, type Bug, type CatalogFunction } from './catalog';
import { renderTask, type Language, type Part } from './render';

export interface GenerateOptions {
  seed: number;
  count: number;
  split: Split;
  languages: readonly Language[];
  levels: { min: number; max: number };
  evalFraction: number;
}

export class RepoFixGenerateError extends Error {
  override readonly name = 'RepoFixGenerateError';
}

/** FNV-1a of a bug's id (function and bug): its split depends on nothing else. */
export function bugSplit(fn: CatalogFunction, bug: Bug, evalFraction: number): Split {
  let h = 0x811c9dc5;
  const s = `${fn.id}.${bug.id}`;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return (h % 10_000) / 10_000 < evalFraction ? 'eval' : 'train';
}

const SHORT: Record<Language, string> = { python: 'py', javascript: 'js' };

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)];
}

/** Up to `n` distinct functions of the catalog other than `not`, in a seeded order. */
function others(rand: () => number, not: Set<string>, n: number): CatalogFunction[] {
  const pool = CATALOG.filter((f) => !not.has(f.id));
  const out: CatalogFunction[] = [];
  while (out.length < n && pool.length > 0) out.push(pool.splice(Math.floor(rand() * pool.length), 1)[0]);
  return out;
}

/** One seeded draw of a task of `split` (null when it cannot be made); rendered only when its id is new. */
function draw(rand: () => number, o: GenerateOptions, candidates: Part[], seen: Set<string>): EnvTask | null {
  const lang = pick(rand, o.languages);
  const level = o.levels.min + Math.floor(rand() * (o.levels.max - o.levels.min + 1));
  if (candidates.length === 0) return null;
  const first = pick(rand, candidates);
  const broken: Part[] = [first];
  if (level === 3) {
    const second = candidates.filter((c) => c.fn.id !== first.fn.id);
    if (second.length === 0) return null;
    broken.push(pick(rand, second));
  }
  const fine: Part[] = others(rand, new Set(broken.map((p) => p.fn.id)), level === 1 ? 0 : 3 - broken.length).map((fn) => ({
    fn,
    bug: null,
  }));
  // The module's functions in catalog order, so the broken one is not always first.
  const parts = [...broken, ...fine].sort((a, b) => CATALOG.indexOf(a.fn) - CATALOG.indexOf(b.fn));
  const id = `repo-fix:${SHORT[lang]}:d${level}:${parts.map((p) => (p.bug ? `${p.fn.id}.${p.bug.id}` : p.fn.id)).join('+')}`;
  if (seen.has(id)) return null;
  seen.add(id);
  const { prompt, data } = renderTask(lang, parts, level);
  return {
    id,
    env: 'repo-fix',
    messages: [{ role: 'user', content: prompt }],
    tools: [],
    split: o.split,
    difficulty: level,
    data: data as unknown as Record<string, unknown>,
  };
}

/** `count` distinct tasks of `split`, deterministic in the options; throws when the space holds fewer. */
export function generateRepoFixTasks(o: GenerateOptions): EnvTask[] {
  if (!Number.isInteger(o.count) || o.count < 0)
    throw new RepoFixGenerateError(`count: must be a non-negative integer, got ${String(o.count)}`);
  if (o.split !== 'train' && o.split !== 'eval')
    throw new RepoFixGenerateError(`split: must be train or eval, got ${JSON.stringify(o.split)}`);
  const rand = seededRandom((o.seed ^ (o.split === 'eval' ? 0x5eed_e7a1 : 0)) >>> 0);
  const seen = new Set<string>();
  const out: EnvTask[] = [];
  // The bugs of this split.
  const candidates = CATALOG.flatMap((fn) =>
    fn.bugs.filter((b) => bugSplit(fn, b, o.evalFraction) === o.split).map((bug) => ({ fn, bug })),
  );
  const attempts = o.count * 200 + 10_000;
  for (let i = 0; i < attempts && out.length < o.count; i++) {
    const t = draw(rand, o, candidates, seen);
    if (t) out.push(t);
  }
  if (out.length < o.count)
    throw new RepoFixGenerateError(
      `count: only ${out.length} distinct ${o.split} tasks for languages ${o.languages.join(', ')}, levels ${o.levels.min}..${o.levels.max}, evalFraction ${o.evalFraction}; asked for ${o.count}`,
    );
  return out;
}
