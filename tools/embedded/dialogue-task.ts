/**
 * The built-in multi-turn task of the embedded preview: byte-level arithmetic dialogues. A
 * trajectory is T turns; the sample of turn k is (every earlier turn + question k → answer k),
 * exactly the per-call samples an agent trajectory produces, so consecutive samples share long
 * prefixes and prefix-tree packing has real sharing to exploit.
 */
import type { PackSample } from '@anvil/rl';

const bytes = (s: string) => Array.from(Buffer.from(s, 'utf8'));

export function makeTrajectory(rand: () => number, turns: number): PackSample[] {
  const samples: PackSample[] = [];
  let history: number[] = bytes('You add numbers.\n');
  for (let k = 0; k < turns; k++) {
    const a = Math.floor(rand() * 50);
    const b = Math.floor(rand() * 50);
    const question = bytes(`Q: ${a}+${b}=?\n`);
    const answer = bytes(`A: ${a + b}\n`);
    const prompt = [...history, ...question];
    samples.push({ promptIds: Int32Array.from(prompt), outputIds: Int32Array.from(answer) });
    history = [...prompt, ...answer];
  }
  return samples;
}
