import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { layOutSnapshot, writeFiles } from '../snapshot';
import { repoFixData } from '../task-data';
import { parseTestOutput, scoreTests } from '../test-report';
import { CATALOG, seedBug } from './catalog';
import { bugSplit, generateRepoFixTasks, type GenerateOptions } from './generate';
import { pyLiteral, type Language } from './render';

const work = mkdtempSync(join(tmpdir(), 'anvil-repo-fix-builtin-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Runs every case of `sources` (function name → source) in one interpreter: the cases each passes, by variant. */
function runCases(
  lang: Language,
  variants: { key: string; name: string; source: string; cases: { args: unknown[]; expect: unknown }[] }[],
) {
  const payload = JSON.stringify(variants);
  const r =
    lang === 'python'
      ? spawnSync(
          '/usr/bin/python3',
          [
            '-c',
            `import json,sys
out={}
for v in json.loads(sys.stdin.read()):
    ns={}
    exec(v["source"], ns)
    ok=[]
    for c in v["cases"]:
        try: ok.append(ns[v["name"]](*c["args"]) == c["expect"])
        except Exception: ok.append(False)
    out[v["key"]]=ok
print(json.dumps(out))`,
          ],
          { input: payload, encoding: 'utf8' },
        )
      : spawnSync(
          'node',
          [
            '-e',
            `const assert=require('node:assert');let t='';process.stdin.on('data',d=>t+=d).on('end',()=>{const out={};for(const v of JSON.parse(t)){const m={exports:{}};new Function('module',v.source+'\\nmodule.exports.f='+v.name+';')(m);out[v.key]=v.cases.map(c=>{try{assert.deepStrictEqual(m.exports.f(...c.args),c.expect);return true}catch{return false}})}console.log(JSON.stringify(out))})`,
          ],
          { input: payload, encoding: 'utf8' },
        );
  if (r.status !== 0) throw new Error(`${lang}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, boolean[]>;
}

describe('repo-fix built-in catalog', () => {
  for (const lang of ['python', 'javascript'] as const) {
    it(`${lang}: every correct function passes its cases, every seeded bug fails its example case`, () => {
      const variants = CATALOG.flatMap((fn) => [
        { key: `${fn.id}`, name: fn.names[lang], source: fn[lang], cases: fn.cases },
        ...fn.bugs.map((b) => ({ key: `${fn.id}.${b.id}`, name: fn.names[lang], source: seedBug(fn[lang], b[lang]), cases: fn.cases })),
      ]);
      const ok = runCases(lang, variants);
      for (const fn of CATALOG) {
        expect(ok[fn.id], `${lang} ${fn.id}`).toEqual(fn.cases.map(() => true));
        for (const b of fn.bugs) expect(ok[`${fn.id}.${b.id}`][b.example], `${lang} ${fn.id}.${b.id} breaks case ${b.example}`).toBe(false);
      }
    });
  }

  it('writes JSON values as Python literals', () => {
    expect(pyLiteral([true, false, null, 'a"b', 1.5, { k: [] }])).toBe('[True, False, None, "a\\"b", 1.5, {"k": []}]');
  });
});

describe('repo-fix built-in generator', () => {
  const opts = (o: Partial<GenerateOptions>): GenerateOptions => ({
    seed: 7,
    count: 20,
    split: 'train',
    languages: ['python', 'javascript'],
    levels: { min: 1, max: 3 },
    evalFraction: 0.2,
    ...o,
  });

  it('is deterministic in its seed, distinct, and covers both languages and every level', () => {
    const a = generateRepoFixTasks(opts({ count: 60 }));
    expect(generateRepoFixTasks(opts({ count: 60 }))).toEqual(a);
    expect(generateRepoFixTasks(opts({ count: 60, seed: 8 })).map((t) => t.id)).not.toEqual(a.map((t) => t.id));
    expect(new Set(a.map((t) => t.id)).size).toBe(60);
    expect(new Set(a.map((t) => t.id.split(':')[1]))).toEqual(new Set(['py', 'js']));
    expect(new Set(a.map((t) => t.difficulty))).toEqual(new Set([1, 2, 3]));
    for (const t of a) {
      expect(t).toMatchObject({ env: 'repo-fix', split: 'train', tools: [] });
      expect(t.id.length).toBeLessThanOrEqual(128);
      const data = repoFixData(t.id, t.data);
      expect(data.test.names!.length).toBeGreaterThan(0);
      // The held-back tests are not in the repository the agent gets, beyond level 1's one visible case.
      const files = (data.repo as { files: Record<string, string> }).files;
      for (const path of Object.keys(data.test.files!)) {
        if (t.difficulty > 1) expect(files[path], `${t.id} ${path}`).toBeUndefined();
        else if (files[path] !== undefined) expect(files[path].match(/def test_|test\(/g), `${t.id} ${path}`).toHaveLength(1);
      }
    }
  });

  it('holds out whole bugs: no eval task shares a bug with a train task', () => {
    const bugs = (split: 'train' | 'eval') =>
      new Set(
        generateRepoFixTasks(opts({ split, count: split === 'train' ? 150 : 40 })).flatMap((t) =>
          t.id
            .split(':')[3]
            .split('+')
            .filter((p) => p.includes('.')),
        ),
      );
    const train = bugs('train');
    const held = bugs('eval');
    expect(held.size).toBeGreaterThan(0);
    for (const b of held) expect(train.has(b), b).toBe(false);
    for (const fn of CATALOG)
      for (const b of fn.bugs) expect(bugSplit(fn, b, 0.2)).toBe(held.has(`${fn.id}.${b.id}`) ? 'eval' : bugSplit(fn, b, 0.2));
  });

  it('refuses a count the task space cannot fill, naming it', () => {
    expect(() => generateRepoFixTasks(opts({ count: 5000, languages: ['python'], levels: { min: 1, max: 1 } }))).toThrow(
      /only \d+ distinct train tasks/,
    );
  });

  it('each task fails its held-back tests as given and passes them all with its reference fix (the real test commands)', async () => {
    const tasks = [
      ...generateRepoFixTasks(opts({ count: 3, languages: ['python'], levels: { min: 1, max: 3 }, seed: 3 })),
      ...generateRepoFixTasks(opts({ count: 3, languages: ['javascript'], levels: { min: 1, max: 3 }, seed: 3 })),
    ];
    for (const t of tasks) {
      const data = repoFixData(t.id, t.data);
      const score = async (withFix: boolean) => {
        const dir = mkdtempSync(join(work, 'task-'));
        await layOutSnapshot(data.repo, work, dir);
        if (withFix) await writeFiles(dir, data.solution!.files);
        await writeFiles(dir, data.test.files!);
        const argv = data.test.command as string[];
        const r = spawnSync(argv[0], argv.slice(1), {
          cwd: dir,
          encoding: 'utf8',
          env: { PATH: process.env.PATH, PYTHONDONTWRITEBYTECODE: '1' },
        });
        return scoreTests(parseTestOutput(data.test.format, `${r.stdout}\n${r.stderr}`, r.status), data.test.names);
      };
      const broken = await score(false);
      expect(broken.reward, `${t.id} as given`).toBeLessThan(1);
      expect(broken.total).toBe(data.test.names!.length);
      expect(await score(true), `${t.id} fixed`).toMatchObject({ reward: 1, total: data.test.names!.length });
    }
  });
});
