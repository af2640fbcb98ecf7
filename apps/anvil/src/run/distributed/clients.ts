/**
 * The services' internal HTTP APIs as the distributed run's driver uses them: the rollout-manager
 * (task sets, submissions, pinned evaluations, state: the rollout-manager's http.controller.ts)
 * and the trainer (state, steps, pause/resume: the trainer's http/trainer.controller.ts).
 */
import { Agent, request } from 'undici';
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import type { LoggedStep } from '@anvil/trainer';
import type { EvaluationRequest, RolloutState } from '../services';

/** An evaluation answers when its last rollout is scored: minutes for a large eval split, past undici's default 300 s header timeout. */
const patient = new Agent({ headersTimeout: 0, bodyTimeout: 0 });

export class ServiceHttpError extends Error {
  override name = 'ServiceHttpError';
}

async function call<T>(method: 'GET' | 'POST', url: string, body?: unknown, timeoutMs = 30_000): Promise<T> {
  const res = await request(url, {
    method,
    ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    ...(timeoutMs > 0 ? { headersTimeout: timeoutMs, bodyTimeout: timeoutMs } : { dispatcher: patient }),
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new ServiceHttpError(`${method} ${url}: ${res.statusCode} ${text.slice(0, 2000)}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

export class RolloutManagerClient {
  constructor(private readonly url: string) {}

  loadBuiltin(spec: object, builtin: { env: string; seed: number; trainCount: number; evalCount: number }) {
    return call<{ taskSetId: string; tasks: number }>('POST', `${this.url}/internal/v1/task-sets`, { spec, builtin }, 120_000);
  }

  /** A task JSONL's lines (validated again by the rollout-manager). */
  loadJsonl(spec: object, jsonl: string) {
    return call<{ taskSetId: string; tasks: number }>('POST', `${this.url}/internal/v1/task-sets`, { spec, jsonl }, 120_000);
  }

  /** Queues one group per train task of the set (a pass over the train split), in a seeded order when shuffleSeed is given. */
  submit(req: { taskSetId: string; shuffleSeed?: number }) {
    return call<{ groupIds: string[]; rolloutIds: string[] }>('POST', `${this.url}/internal/v1/submissions`, req, 120_000);
  }

  /** Runs the eval split pinned to `version`; answers when it is done (no timeout). */
  evaluate(req: EvaluationRequest) {
    return call<EvaluationCompletedV1>('POST', `${this.url}/internal/v1/evaluations`, req, 0);
  }

  state() {
    return call<RolloutState>('GET', `${this.url}/internal/v1/state`);
  }
}

export interface TrainerState {
  started: boolean;
  version: number | null;
  done: boolean;
  failure: string | null;
  /** Batches handled since the trainer process started (its step log numbers them 1..batches), and the time spent on them. */
  totals: { batches: number; busyMs: number } | null;
}

export class TrainerClient {
  constructor(private readonly url: string) {}

  state() {
    return call<TrainerState>('GET', `${this.url}/internal/v1/state`);
  }

  /** Steps after `after`; NaN values (a skipped step's loss) arrive as null in JSON. */
  steps(after: number) {
    return call<{ steps: LoggedStep[]; lastSeq: number; missed: number }>('GET', `${this.url}/internal/v1/steps?after=${after}`);
  }

  /** Holds training after the batch in progress (answers once idle, its version published). */
  pause() {
    return call<{ version: number }>('POST', `${this.url}/internal/v1/pause`, undefined, 0);
  }

  resume() {
    return call<{ version: number }>('POST', `${this.url}/internal/v1/resume`);
  }
}
