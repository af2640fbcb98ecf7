import { randomUUID } from 'node:crypto';
import type { GenerateRequestInput } from '@anvil/contracts';
import { InferenceProxyClient, InferenceProxyError } from '@anvil/inference-client';
import type { GatewaySession } from '@anvil/persistence';
import { appendFingerprint, fingerprintMessages, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import type { Logger } from '@anvil/observability';
import { linkAbort } from '@anvil/service-kit';
import type { AnsweredCall, CallRecorder } from '../capture/call-recorder';
import { RecordNotDurableError } from '../capture/call-recorder';
import type { CaptureRow, CaptureStore } from '../capture/capture-store';
import { planPrompt, type PlannedPrompt } from '../capture/prompt-planner';
import { RenderCache } from '../capture/render-cache';
import type { GatewayConfig } from '../config';
import { runGeneration, type GenerationResult } from '../generation/generation-runner';
import { ApiError } from '../http/api-error';
import type { GatewayMetrics } from '../metrics';
import type { ModelRegistry, ServedModel } from '../models/model-registry';
import { buildAssistantReply, type AssistantReply } from '../openai/assistant-reply';
import type { ChatRequest, CompletionRequest } from '../openai/chat-request';
import { toChatMessages, toToolDefinitions } from '../openai/messages';
import type { SessionStore } from '../sessions/session-store';
import { StalenessGate } from '../sessions/staleness-gate';
import type { PreparedCall } from './prepared-call';

/** A chat request's messages, tools and template variables as rendered, with their prefix fingerprints. */
export interface ChatInput {
  messages: ChatMessage[];
  tools: ToolDefinition[] | null;
  toolChoice: ChatRequest['tool_choice'];
  extra: Record<string, unknown>;
  fingerprints: string[];
}

/** One generated choice, with the reply it became (chat) and what was recorded. */
export interface ChoiceResult {
  index: number;
  callId: string;
  generation: GenerationResult;
  reply: AssistantReply | null;
  /** finish_reason as answered (OpenAI's vocabulary). */
  finishReason: 'stop' | 'length' | 'tool_calls';
  turnIndex: number;
  branchId: string;
}

export interface CallServiceDeps {
  config: Pick<GatewayConfig, 'GATEWAY_DEFAULT_MAX_TOKENS' | 'GATEWAY_MAX_N' | 'MAX_STALENESS' | 'GATEWAY_RETRY_AFTER_S'> & Partial<Pick<GatewayConfig, 'GATEWAY_CAPTURE'>>;
  registry: ModelRegistry;
  client: InferenceProxyClient;
  sessions: SessionStore;
  gate: StalenessGate;
  captures: CaptureStore;
  recorder: CallRecorder;
  metrics: GatewayMetrics;
  logger: Logger;
}

/**
 * The path of every answered call: validate → plan the prompt (token-exact extension or a new
 * branch) → admit (staleness) → generate n choices → record them durably → answer. The HTTP
 * layer (JSON or SSE) only shapes what this returns.
 */
export class CallService {
  /** Branch prompts rendered recently (the opening prompt of every rollout of a group, retries). */
  private readonly renders = new RenderCache(16_000_000);

  constructor(private readonly d: CallServiceDeps) {}

  private servedModel(session: GatewaySession, name: string): ServedModel {
    const model = this.d.registry.get(name);
    if (!model) return throwError(new ApiError(404, 'invalid_request_error', `The model \`${name}\` does not exist`, 'model_not_found', 'model'));
    if (name !== session.model) throw ApiError.invalid(`this session serves model \`${session.model}\`, not \`${name}\``, 'model', 'model_not_found');
    return model;
  }

  private common(session: GatewaySession, req: ChatRequest | CompletionRequest) {
    const model = this.servedModel(session, req.model);
    const n = req.n ?? 1;
    if (n > this.d.config.GATEWAY_MAX_N) throw ApiError.invalid(`n must be at most ${this.d.config.GATEWAY_MAX_N}`, 'n');
    const stop = req.stop === null || req.stop === undefined ? [] : typeof req.stop === 'string' ? [req.stop] : req.stop;
    const temperature = req.temperature ?? 1;
    const sampling = { temperature, topP: req.top_p ?? 1, topK: req.top_k !== null && req.top_k !== undefined && req.top_k > 0 ? req.top_k : 0, seed: req.seed ?? null };
    const contextLimit = Math.min(model.maxContextTokens, session.maxContextTokens ?? Infinity);
    return { model, n, stop, sampling, contextLimit };
  }

  private limits(promptTokens: number, contextLimit: number, requested: number | null | undefined): number {
    if (promptTokens >= contextLimit) {
      throw new ApiError(400, 'invalid_request_error', `This model's maximum context length is ${contextLimit} tokens; the prompt has ${promptTokens}.`, 'context_length_exceeded', 'messages');
    }
    // A black-box agent often asks for more than fits: it gets what the context leaves
    // (finish_reason "length" tells it), rather than an error it cannot act on.
    return Math.min(requested ?? this.d.config.GATEWAY_DEFAULT_MAX_TOKENS, contextLimit - promptTokens);
  }

  /**
   * What a chat request renders and is fingerprinted as (validated; throws ApiError): computed
   * before the session lookup, which fetches the capture row it extends in the same round trip.
   */
  chatInput(req: ChatRequest): ChatInput {
    if (req.top_logprobs !== null && req.top_logprobs !== undefined && req.top_logprobs > 0 && req.logprobs !== true) {
      throw ApiError.invalid('top_logprobs needs logprobs: true', 'top_logprobs');
    }
    const tools = toToolDefinitions(req.tools);
    const toolChoice = req.tool_choice ?? undefined;
    if (toolChoice && typeof toolChoice === 'object' && !tools?.some((t) => t.function.name === toolChoice.function.name)) {
      throw ApiError.invalid(`tool_choice names \`${toolChoice.function.name}\`, which is not among the tools`, 'tool_choice');
    }
    if (toolChoice === 'required' && !tools) throw ApiError.invalid('tool_choice "required" needs tools', 'tool_choice');
    const messages = toChatMessages(req.messages);
    const extra = req.chat_template_kwargs ?? {};
    return { messages, tools, toolChoice, extra, fingerprints: fingerprintMessages(messages, tools, extra) };
  }

  async prepareChat(session: GatewaySession, req: ChatRequest, receivedAt: number, input: ChatInput = this.chatInput(req), match?: CaptureRow | null): Promise<PreparedCall> {
    const { model, n, stop, sampling, contextLimit } = this.common(session, req);
    const { messages, tools, toolChoice, extra, fingerprints } = input;
    let plan: PlannedPrompt;
    try {
      plan = await planPrompt({ format: model.format, store: this.d.captures, sessionId: session.id, isFirstCall: session.callCount === 0, messages, tools, extra, fingerprints, match, renders: this.renders });
    } catch (err) {
      if (err instanceof ApiError) throw err;
      if (err instanceof TypeError || /template|jinja|raise_exception|Conversation|role/i.test((err as Error).message ?? '')) {
        throw new ApiError(422, 'invalid_request_error', `the messages cannot be rendered with this model's chat template: ${(err as Error).message}`, 'unprocessable_messages', 'messages');
      }
      throw err;
    }
    const maxTokens = this.limits(plan.promptIds.length, contextLimit, req.max_completion_tokens ?? req.max_tokens);
    return {
      kind: 'chat',
      requestId: randomUUID(),
      receivedAt,
      session,
      model,
      plan,
      branchId: plan.parent?.branchId ?? newBranchId(),
      callIds: Array.from({ length: n }, () => `call_${randomUUID()}`),
      maxTokens,
      sampling,
      stop,
      logprobs: req.logprobs === true,
      topLogprobs: req.logprobs === true ? (req.top_logprobs ?? 0) : 0,
      tools,
      toolChoice,
      extra,
      messages,
      fingerprint: fingerprints[fingerprints.length - 1],
    };
  }

  /** /v1/completions: the prompt is text (encoded as is, no template) or token ids; every call starts its own branch. */
  async prepareCompletion(session: GatewaySession, req: CompletionRequest, receivedAt: number): Promise<PreparedCall> {
    const { model, n, stop, sampling, contextLimit } = this.common(session, req);
    const tok = model.format.tokenizer;
    let promptIds: number[];
    if (typeof req.prompt === 'string' || typeof req.prompt[0] === 'string') {
      const text = typeof req.prompt === 'string' ? req.prompt : (req.prompt[0] as string);
      if (text.length === 0) throw ApiError.invalid('prompt must not be empty', 'prompt');
      promptIds = tok.encode(text);
    } else {
      promptIds = req.prompt as number[];
      if (promptIds.some((id) => id >= tok.vocabSize)) throw ApiError.invalid(`prompt token ids must be below ${tok.vocabSize}`, 'prompt');
    }
    const maxTokens = this.limits(promptIds.length, contextLimit, req.max_tokens ?? 16);
    const plan: PlannedPrompt = { promptIds, messages: [], parent: null, reusedTokens: 0, branchCause: 'no-matching-call', promptOpensThink: false, text: '' };
    return {
      kind: 'completion',
      requestId: randomUUID(),
      receivedAt,
      session,
      model,
      plan,
      branchId: newBranchId(),
      callIds: Array.from({ length: n }, () => `call_${randomUUID()}`),
      maxTokens,
      sampling,
      stop,
      logprobs: req.logprobs !== null && req.logprobs !== undefined,
      topLogprobs: req.logprobs ?? 0,
      tools: null,
      toolChoice: undefined,
      extra: {},
      messages: [],
    };
  }

  /** Staleness gating of the session's first call (429 + Retry-After when over capacity). */
  async admit(call: PreparedCall): Promise<void> {
    if (call.session.policyVersionAtStart !== null) return;
    const admission = await this.d.gate.admit(call.session.id);
    if (!admission.admitted) {
      this.d.metrics.backpressure.inc();
      throw StalenessGate.refusal(admission, this.d.config.MAX_STALENESS, this.d.config.GATEWAY_RETRY_AFTER_S);
    }
  }

  /** Generates the n choices in parallel; `onText(index, text)` sees each one's text as it grows. */
  async generate(call: PreparedCall, opts: { signal: AbortSignal; onText?: (index: number, text: string) => void }): Promise<GenerationResult[]> {
    const failFast = new AbortController();
    const link = linkAbort([opts.signal, failFast.signal]);
    const signal = link.signal;
    const tasks = call.callIds.map(async (callId, index) => {
      const request: GenerateRequestInput = {
        requestId: callId,
        sessionId: call.session.id,
        promptIds: call.plan.promptIds,
        maxTokens: call.maxTokens,
        temperature: call.sampling.temperature,
        topP: call.sampling.topP,
        topK: call.sampling.topK,
        // n independent samples: with a seed, choice i uses seed + i (the same seed would give n equal samples).
        seed: call.sampling.seed === null ? null : call.sampling.seed + index,
        stopIds: call.model.format.stopTokenIds,
        ...(call.topLogprobs > 0 ? { topLogprobs: call.topLogprobs } : {}),
      };
      try {
        return await runGeneration({ client: this.d.client, request, tokenizer: call.model.format.tokenizer, stop: call.stop, signal, onText: opts.onText && ((t) => opts.onText?.(index, t)) });
      } catch (err) {
        failFast.abort();
        throw err;
      }
    });
    try {
      return await Promise.all(tasks);
    } catch (err) {
      await Promise.allSettled(tasks);
      throw generationError(err, opts.signal.aborted);
    } finally {
      link.dispose();
    }
  }

  /** Turns generations into replies and records them durably (throws instead when that fails). */
  async record(call: PreparedCall, generations: GenerationResult[]): Promise<ChoiceResult[]> {
    const { session, plan } = call;
    const fmt = call.model.format;
    const replies = generations.map((g, i) =>
      call.kind === 'chat' ? buildAssistantReply(g.text, { format: fmt, tools: call.tools, toolChoice: call.toolChoice, promptOpensThink: plan.promptOpensThink, idSeed: call.callIds[i] }) : null,
    );
    const branchId = call.branchId;
    const finishedAt = Date.now();
    const finishReasons = generations.map((g, i) => (g.finishReason === 'stop' && replies[i]?.hasToolCalls ? 'tool_calls' : g.finishReason === 'stop' ? 'stop' : 'length'));
    const results = (firstTurn: number): ChoiceResult[] =>
      generations.map((g, i) => ({ index: i, callId: call.callIds[i], generation: g, reply: replies[i], finishReason: finishReasons[i], turnIndex: firstTurn + i, branchId }));
    if (this.d.config.GATEWAY_CAPTURE === 'off') {
      // Capture off: nothing is recorded, so no turn is reserved and no capture state written
      // (see config.ts); turn indexes are then only what the session had counted before.
      this.d.metrics.records.inc({ outcome: 'skipped' }, generations.length);
      return results(session.callCount);
    }
    const answered: AnsweredCall[] = generations.map((g, i) => {
      const reply = replies[i];
      return {
        callId: call.callIds[i],
        branchId,
        parentCallId: plan.parent?.callId ?? null,
        promptIds: plan.promptIds,
        reusedPromptTokens: plan.reusedTokens,
        outputIds: g.outputIds,
        logprobs: g.logprobs,
        versions: g.versions,
        finishReason: g.finishReason === 'abort' ? 'abort' : finishReasons[i],
        sampling: { ...call.sampling, seed: call.sampling.seed === null ? null : call.sampling.seed + i },
        timings: { receivedAt: call.receivedAt, firstTokenAt: g.firstTokenAt, finishedAt },
        capture: reply
          ? {
              callId: call.callIds[i],
              sessionId: session.id,
              branchId,
              parentCallId: plan.parent?.callId ?? null,
              // The prefix hashes chain, and plan.messages fingerprint as the request's messages do
              // (the stored reply in place of its echo is checked equal by the same canonical form).
              replyFingerprint: call.fingerprint ? appendFingerprint(call.fingerprint, reply.message) : (fingerprintMessages([...plan.messages, reply.message], call.tools, call.extra).at(-1) as string),
              messages: plan.messages,
              assistantMessage: reply.message,
              tools: call.tools,
              templateExtra: call.extra,
              promptIds: plan.promptIds,
              outputIds: g.outputIds,
              promptText: plan.text,
            }
          : null,
      };
    });
    let recorded: { firstTurn: number } | null;
    try {
      recorded = await this.d.recorder.record(session, call.model.name, answered, { newBranches: plan.parent ? 0 : 1, parent: plan.parent });
    } catch (err) {
      this.d.metrics.records.inc({ outcome: 'failed' }, answered.length);
      if (err instanceof RecordNotDurableError) {
        this.d.logger.error('record not durable; answering an error', { sessionId: session.id, err });
        throw new ApiError(503, 'server_error', 'the call could not be recorded durably, so it is not answered; retry', 'record_unavailable');
      }
      throw err;
    }
    if (!recorded) throw new ApiError(410, 'invalid_request_error', 'this session was closed while the call ran; it was not recorded', 'session_closed');
    this.d.metrics.records.inc({ outcome: 'durable' }, answered.length);
    this.d.metrics.capture.inc({ kind: plan.parent ? 'extend' : 'branch', reason: plan.branchCause ?? 'extends' });
    this.d.metrics.tokens.inc({ kind: 'prompt' }, plan.promptIds.length * answered.length);
    this.d.metrics.tokens.inc({ kind: 'reused_prompt' }, plan.reusedTokens * answered.length);
    this.d.metrics.tokens.inc({ kind: 'output' }, generations.reduce((s, g) => s + g.outputIds.length, 0));
    return results(recorded.firstTurn);
  }
}

const newBranchId = () => `branch_${randomUUID()}`;

function throwError(e: Error): never {
  throw e;
}

/** Maps a failed generation onto the status the agent gets. */
function generationError(err: unknown, clientGone: boolean): ApiError {
  if (err instanceof ApiError) return err;
  if (clientGone) return new ApiError(499, 'invalid_request_error', 'the client went away', 'client_closed');
  if (err instanceof InferenceProxyError) {
    if (err.status === 400 || err.status === 422) return new ApiError(400, 'invalid_request_error', `the inference engine refused the request: ${err.body.error.message}`, err.code ?? 'backend_rejected');
    if (err.status === 503 || err.status === 429) return new ApiError(503, 'server_error', `inference unavailable: ${err.body.error.message}`, err.code ?? 'backend_unavailable');
    return new ApiError(502, 'server_error', `inference failed: ${err.body.error.message}`, err.code ?? 'backend_error');
  }
  return new ApiError(502, 'server_error', `inference failed: ${(err as Error)?.message ?? String(err)}`, 'backend_unreachable');
}
