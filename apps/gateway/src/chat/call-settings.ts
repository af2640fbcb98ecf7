import type { GatewaySession } from '@anvil/persistence';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import { servedModelFor, type ModelRegistry, type ServedModel } from '../models/model-registry';
import type { ChatRequest, CompletionRequest } from '../openai/chat-request';
import type { PreparedCall } from './prepared-call';

/** What chat and completion requests share: the served model, the choices, stop strings, sampling and the context they fit in. */
export interface CallSettings {
  model: ServedModel;
  n: number;
  stop: string[];
  sampling: PreparedCall['sampling'];
  /** The model's context, or the session's when smaller. */
  contextLimit: number;
}

export function callSettings(
  registry: ModelRegistry,
  config: Pick<GatewayConfig, 'GATEWAY_MAX_N'>,
  session: GatewaySession,
  req: ChatRequest | CompletionRequest,
): CallSettings {
  const model = servedModelFor(registry, session, req.model);
  const n = req.n ?? 1;
  if (n > config.GATEWAY_MAX_N) throw GatewayError.invalid(`n must be at most ${config.GATEWAY_MAX_N}`, 'n');
  const stop = req.stop === null || req.stop === undefined ? [] : typeof req.stop === 'string' ? [req.stop] : req.stop;
  const temperature = req.temperature ?? 1;
  const sampling = {
    temperature,
    topP: req.top_p ?? 1,
    topK: req.top_k !== null && req.top_k !== undefined && req.top_k > 0 ? req.top_k : 0,
    seed: req.seed ?? null,
  };
  const contextLimit = Math.min(model.maxContextTokens, session.maxContextTokens ?? Infinity);
  return { model, n, stop, sampling, contextLimit };
}

/** The tokens a call may generate (`requested`, else `defaultMax`, at most what the context leaves); a prompt that fills the context is a 400. */
export function maxTokensFor(promptTokens: number, contextLimit: number, requested: number | null | undefined, defaultMax: number): number {
  if (promptTokens >= contextLimit) {
    throw GatewayError.invalid(
      `This model's maximum context length is ${contextLimit} tokens; the prompt has ${promptTokens}.`,
      'messages',
      'context_length_exceeded',
    );
  }
  // A black-box agent often asks for more than fits: it gets what the context leaves
  // (finish_reason "length" tells it), rather than an error it cannot act on.
  return Math.min(requested ?? defaultMax, contextLimit - promptTokens);
}
