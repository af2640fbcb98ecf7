import { describe, expect, it } from 'vitest';
import { parseTaskJsonl, TaskFileError } from './jsonl';

describe('JSONL task files', () => {
  it('parses prompt or messages, tools, verifier, split and difficulty from metadata', () => {
    const text = [
      JSON.stringify({
        id: 'a',
        prompt: 'What is 2+2?',
        data: { answer: 4 },
        verifier: { kind: 'function', name: 'final-answer' },
        metadata: { difficulty: 1, split: 'eval' },
      }),
      '',
      JSON.stringify({
        id: 'b',
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: 'hi' },
        ],
        tools: [{ type: 'function', function: { name: 'calc' } }],
        split: 'train',
        difficulty: 3,
      }),
    ].join('\n');
    const tasks = parseTaskJsonl(text);
    expect(tasks).toHaveLength(2);
    expect(tasks[0]).toMatchObject({
      id: 'a',
      split: 'eval',
      difficulty: 1,
      messages: [{ role: 'user', content: 'What is 2+2?' }],
      verifier: { kind: 'function', name: 'final-answer', timeoutMs: 10000 },
    });
    expect(tasks[1]).toMatchObject({ id: 'b', split: 'train', difficulty: 3, tools: [{ function: { name: 'calc' } }] });
  });

  it('refuses a malformed file whole, naming every bad line and why', () => {
    const text = [
      JSON.stringify({ id: 'ok', prompt: 'x' }),
      '{not json',
      JSON.stringify({ id: 'no-prompt' }),
      JSON.stringify({ id: 'ok', prompt: 'dup' }),
      JSON.stringify({ id: 'v', prompt: 'x', verifier: { kind: 'oracle' } }),
      JSON.stringify({ id: 's', prompt: 'x', metadata: { split: 'test' } }),
      JSON.stringify({ prompt: 'no id' }),
    ].join('\n');
    let err: TaskFileError | undefined;
    try {
      parseTaskJsonl(text, 'tasks.jsonl');
    } catch (e) {
      err = e as TaskFileError;
    }
    expect(err).toBeInstanceOf(TaskFileError);
    expect(err!.problems.map((p) => p.line)).toEqual([2, 3, 4, 5, 6, 7]);
    expect(err!.problems[0].reason).toMatch(/invalid JSON/);
    expect(err!.problems[1].reason).toMatch(/messages: exactly one of messages or prompt/);
    expect(err!.problems[2].reason).toMatch(/id: duplicate of line 1/);
    expect(err!.problems[3].reason).toMatch(/verifier/);
    expect(err!.problems[4].reason).toMatch(/metadata.split/);
    expect(err!.problems[5].reason).toMatch(/^id: /);
    expect(err!.message).toMatch(/^task file tasks.jsonl: 6 bad line\(s\): line 2: invalid JSON/);
  });
});
