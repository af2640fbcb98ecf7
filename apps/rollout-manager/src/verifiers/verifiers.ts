import type { ChatMessage, Environment, EnvTask, Transcript, VerifyResult } from '../environments/types';
import type { VerifierSpec } from '../tasks/task-set';
import { commandVerifier, type CommandVerifierDeps } from './command-verifier';
import { checked, VerifierError } from './verifier-result';

export { VerifierError } from './verifier-result';

/** What every verifier gets: the task and what the agent did. */
export interface VerifierInput {
  task: EnvTask;
  transcript: Transcript;
  /** Black-box agents: exit code, captured output, the answer file's text. */
  agent?: { exitCode: number | null; stdout: string; stderr: string; answerFile: string | null; workspace: string | null };
  /**
   * Black-box agents: the calls the gateway recorded for the session, in order, with the reply
   * each returned. Process rewards of a black-box rollout are per entry of this list (the i-th
   * value goes to calls[i]), since the agent's own transcript is only its claim.
   */
  calls?: { callId: string; message: ChatMessage }[];
}

export type VerifierFn = (input: VerifierInput) => VerifyResult | Promise<VerifyResult>;

export class UnknownVerifierError extends Error {
  override readonly name = 'UnknownVerifierError';
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new VerifierError(`${what} did not answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}

/** Built-in function verifiers usable from JSONL task sets. */
export const BUILTIN_VERIFIERS: Record<string, VerifierFn> = {
  /**
   * The first number in the final answer equals task.data.answer (a number): 1, else 0. For models
   * that answer in a sentence ("The larger number is 98."), where final-answer wants the bare value.
   */
  number: ({ task, transcript }) => {
    const want = Number(task.data.answer);
    if (task.data.answer === undefined || !Number.isFinite(want))
      throw new VerifierError(`task ${task.id}: the number verifier needs a numeric data.answer`);
    const m = /-?\d+(?:\.\d+)?/.exec(transcript.finalAnswer ?? '');
    const got = m ? Number(m[0]) : null;
    const ok = got === want;
    return { outcomeReward: ok ? 1 : 0, success: ok, detail: `first number ${got ?? 'none'}, expected ${want}` };
  },
  /** The final answer (trimmed) equals task.data.answer (as text): 1, else 0. */
  'final-answer': ({ task, transcript }) => {
    const want = task.data.answer;
    if (want === undefined) throw new VerifierError(`task ${task.id}: final-answer needs data.answer`);
    const got = transcript.finalAnswer?.trim() ?? null;
    const ok = got !== null && (got === String(want) || (typeof want === 'number' && Number(got.replace(/\.$/, '')) === want));
    return {
      outcomeReward: ok ? 1 : 0,
      success: ok,
      detail: `answer ${JSON.stringify(got?.slice(0, 200) ?? null)}, expected ${JSON.stringify(want)}`,
    };
  },
};

export interface VerifierDeps extends CommandVerifierDeps {
  environments: ReadonlyMap<string, Environment>;
  functions: Readonly<Record<string, VerifierFn>>;
}

/** Checks a spec resolves (unknown names fail at load, not at the first rollout). */
export function checkVerifier(spec: VerifierSpec, env: string | null, deps: VerifierDeps): void {
  if (spec.kind === 'env' && (env === null || !deps.environments.has(env)))
    throw new UnknownVerifierError(`verifier: kind env needs a built-in environment, task set has ${JSON.stringify(env)}`);
  if (spec.kind === 'function' && !(spec.name in deps.functions) && !(spec.name in BUILTIN_VERIFIERS))
    throw new UnknownVerifierError(
      `verifier.name: unknown verifier function ${JSON.stringify(spec.name)} (known: ${[...Object.keys(BUILTIN_VERIFIERS), ...Object.keys(deps.functions)].join(', ')})`,
    );
}

/**
 * Runs a verifier to a checked result within a bounded time; every failure is a VerifierError.
 * `signal` stops an HTTP or command verifier early (the rollout is shutting down).
 */
export async function runVerifier(
  spec: VerifierSpec,
  env: string | null,
  input: VerifierInput,
  deps: VerifierDeps,
  signal?: AbortSignal,
): Promise<VerifyResult> {
  try {
    switch (spec.kind) {
      case 'env': {
        const e = env === null ? undefined : deps.environments.get(env);
        if (!e) throw new UnknownVerifierError(`verifier: unknown environment ${JSON.stringify(env)}`);
        // An environment that judges the agent's work (repo-fix: its diff) is given its workspace, and its own time.
        const verdict = e.verifyWork
          ? e.verifyWork(input.task, input.transcript, { workspace: input.agent?.workspace ?? null })
          : Promise.resolve().then(() => e.verify(input.task, input.transcript));
        return checked(
          await withTimeout(verdict, e.verifyTimeoutMs?.(input.task) ?? 10_000, `environment ${env} verifier`),
          `environment ${env} verifier`,
        );
      }
      case 'function': {
        const fn = deps.functions[spec.name] ?? BUILTIN_VERIFIERS[spec.name];
        if (!fn) throw new UnknownVerifierError(`verifier.name: unknown verifier function ${JSON.stringify(spec.name)}`);
        return checked(
          await withTimeout(
            Promise.resolve().then(() => fn(input)),
            spec.timeoutMs,
            `verifier ${spec.name}`,
          ),
          `verifier ${spec.name}`,
        );
      }
      case 'http':
        return await httpVerifier(spec, input, signal);
      case 'command':
        return await commandVerifier(spec, verifierRequest(input), input.agent?.workspace ?? null, deps, signal);
    }
  } catch (err) {
    if (err instanceof VerifierError || err instanceof UnknownVerifierError) throw err;
    throw new VerifierError(`verifier threw: ${(err as Error).message}`);
  }
}

async function httpVerifier(
  spec: Extract<VerifierSpec, { kind: 'http' }>,
  input: VerifierInput,
  signal?: AbortSignal,
): Promise<VerifyResult> {
  let last = '';
  for (let attempt = 0; attempt <= spec.retries; attempt++) {
    if (attempt > 0) await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
    try {
      const res = await fetch(spec.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: verifierRequest(input),
        signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(spec.timeoutMs)]) : AbortSignal.timeout(spec.timeoutMs),
      });
      const text = await res.text();
      if (res.status >= 500 || res.status === 429) {
        last = `HTTP ${res.status}`;
        continue;
      }
      if (!res.ok) throw new VerifierError(`reward service ${spec.url}: HTTP ${res.status} ${text.slice(0, 200)}`);
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        throw new VerifierError(`reward service ${spec.url} answered garbage: not JSON`);
      }
      return checked(json, `reward service ${spec.url}`);
    } catch (err) {
      if (err instanceof VerifierError) throw err;
      last = (err as Error).name === 'TimeoutError' ? `no answer within ${spec.timeoutMs} ms` : (err as Error).message;
    }
  }
  throw new VerifierError(`reward service ${spec.url}: ${spec.retries + 1} attempts failed (last: ${last})`);
}

/** What an HTTP or command verifier is sent: the task, the transcript, and (black-box) the agent's run and recorded calls. */
function verifierRequest(input: VerifierInput): string {
  return JSON.stringify({ task: input.task, transcript: input.transcript, agent: input.agent ?? null, calls: input.calls ?? null });
}
