import { randomUUID } from 'node:crypto';
import type { GenerateRequestInput } from '@anvil/contracts';
import { InferenceProxyClient, InferenceProxyError } from '@anvil/inference-client';
import type { GatewaySession } from '@anvil/persistence';
import { appendFingerprint, ChatTemplateError, fingerprintMessages, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import type { Logger } from '@anvil/observability';
import { linkAbort } from '@anvil/service-kit';
import type { AnsweredCall, CallRecorder } from '../capture/call-recorder';
import { RecordNotDurableError } from '../capture/call-recorder';
import type { SessionStateRow } from '../capture/record-committer';
import type { CaptureRow, CaptureStore } from '../capture/capture-store';
import { planPrompt, type PlannedPrompt } from '../capture/prompt-planner';
import { RenderCache } from '../capture/render-cache';
import type { GatewayConfig } from '../config';
import { runGeneration, type GenerationResult } from '../generation/generation-runner';
import type { SessionAuthenticator } from '../auth/session-auth';
import { GatewayError } from '../errors';
import type { GatewayMetrics } from '../metrics';
import { servedModelFor, type ModelRegistry } from '../models/model-registry';
import { buildAssistantReply, type AssistantReply } from '../openai/assistant-reply';
import {
  chatRequestSchema,
  completionRequestSchema,
  describeSchemaError,
  type ChatRequest,
  type CompletionRequest,
} from '../openai/chat-request';
import { toChatMessages, toToolDefinitions } from '../openai/messages';
import type { SessionStore } from '../sessions/session-store';
import type { CallLimitGate } from '../sessions/call-limit-gate';
import { StalenessGate } from '../sessions/staleness-gate';
import { forcedToolCall } from './forced-tool-call';
import type { PreparedCall } from './prepared-call';

/** A chat request's messages, tools and template variables as rendered, with their prefix fingerprints. */
export interface ChatInput {
  messages: ChatMessage[];
  tools: ToolDefinition[] | null;
  toolChoice: ChatRequest['tool_choice'];
  /** false: a reply with several tool calls is returned as text (parallel_tool_calls, disable_parallel_tool_use). */
  parallelToolCalls: boolean;
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

/** One agent request as the HTTP layer received it. */
export interface CallRequest {
  kind: 'chat' | 'completion';
  body: unknown;
  /**
   * A chat request an adapter (the Responses and Messages APIs) has already validated and mapped
   * onto the chat form: used instead of parsing `body`, so every API takes the same path from here.
   */
  chat?: ChatRequest;
  authorization: string | undefined;
  /** The per-session URL's path segment, when the request came that way. */
  sessionKey: string | undefined;
  receivedAt: number;
  /** Aborted when the agent hangs up: the generation stops and nothing is recorded. */
  signal: AbortSignal;
}

/** What the HTTP layer learns while a call runs: the prepared call before generation starts (it may stream from then on). */
export interface CallHooks {
  /** Returns what should see each choice's text as it grows (SSE), if anything. */
  prepared?: (call: PreparedCall) => ((index: number, text: string) => void) | void;
  /**
   * Session state the answer depends on (the Responses API's stored response), given the
   * choices as they will be answered: written by the statement that records the call, so the
   * two are durable together or not at all.
   */
  sessionState?: (call: PreparedCall, choices: readonly ChoiceResult[]) => SessionStateRow[];
}

export interface CallServiceDeps {
  config: Pick<GatewayConfig, 'GATEWAY_DEFAULT_MAX_TOKENS' | 'GATEWAY_MAX_N' | 'MAX_STALENESS' | 'GATEWAY_RETRY_AFTER_S'> &
    Partial<Pick<GatewayConfig, 'GATEWAY_CAPTURE'>>;
  registry: ModelRegistry;
  client: InferenceProxyClient;
  sessions: SessionStore;
  auth: SessionAuthenticator;
  gate: StalenessGate;
  limits: CallLimitGate;
  captures: CaptureStore;
  recorder: CallRecorder;
  metrics: GatewayMetrics;
  logger: Logger;
}

/**
 * The path of every answered call, in one place (`answer`): validate → authenticate (with the
 * capture row the call extends, in the same round trip) → plan the prompt (token-exact
 * extension or a new branch) → admit (staleness, then the session's call limits) → generate n
 * choices → record them durably.
 * The HTTP layer (JSON or SSE) only shapes what this returns; failures are GatewayErrors, which
 * the edge maps onto statuses.
 */
export class CallService {
  /** Branch prompts rendered recently (the opening prompt of every rollout of a group, retries). */
  private readonly renders = new RenderCache(16_000_000);

  constructor(private readonly d: CallServiceDeps) {}

  async answer(req: CallRequest, hooks: CallHooks = {}): Promise<{ call: PreparedCall; choices: ChoiceResult[] }> {
    const call = await this.prepare(req);
    await this.admit(call);
    // The session's call budget and rate limit (429 when over): after the staleness gate, so a
    // first call waiting for capacity spends none of them.
    const limited = await this.d.limits.admit(call.session, call.callIds.length);
    try {
      const onText = hooks.prepared?.(call) ?? undefined;
      const generations = await this.generate(call, { signal: req.signal, onText });
      return { call, choices: await this.record(call, generations, hooks.sessionState) };
    } catch (err) {
      // Not answered (failed, or the agent gone): its calls go back to the budget.
      await limited.release();
      throw err;
    }
  }

  private async prepare(req: CallRequest): Promise<PreparedCall> {
    if (req.kind === 'completion') {
      const session = await this.d.auth.authenticate(req.authorization, req.sessionKey);
      const parsed = completionRequestSchema.safeParse(req.body);
      if (!parsed.success) throw describeSchemaError(parsed.error);
      return this.prepareCompletion(session, parsed.data, req.receivedAt);
    }
    const parsed = req.chat ? ({ success: true, data: req.chat } as const) : chatRequestSchema.safeParse(req.body);
    // The request's fingerprints go with the session lookup (one database round trip finds the
    // session and the call this one extends); a bad request still answers 401 first when the
    // key is bad.
    let input: ChatInput | undefined;
    let invalid: unknown = parsed.success ? undefined : describeSchemaError(parsed.error);
    if (parsed.success) {
      try {
        input = this.chatInput(parsed.data);
      } catch (err) {
        invalid = err;
      }
    }
    const { session, match } = await this.d.auth.authenticateCall(
      req.authorization,
      req.sessionKey,
      input ? input.fingerprints.slice(1) : [],
    );
    if (invalid !== undefined || !parsed.success || !input) throw invalid;
    return this.prepareChat(session, parsed.data, req.receivedAt, input, match);
  }

  private common(session: GatewaySession, req: ChatRequest | CompletionRequest) {
    const model = servedModelFor(this.d.registry, session, req.model);
    const n = req.n ?? 1;
    if (n > this.d.config.GATEWAY_MAX_N) throw GatewayError.invalid(`n must be at most ${this.d.config.GATEWAY_MAX_N}`, 'n');
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

  private limits(promptTokens: number, contextLimit: number, requested: number | null | undefined): number {
    if (promptTokens >= contextLimit) {
      throw GatewayError.invalid(
        `This model's maximum context length is ${contextLimit} tokens; the prompt has ${promptTokens}.`,
        'messages',
        'context_length_exceeded',
      );
    }
    // A black-box agent often asks for more than fits: it gets what the context leaves
    // (finish_reason "length" tells it), rather than an error it cannot act on.
    return Math.min(requested ?? this.d.config.GATEWAY_DEFAULT_MAX_TOKENS, contextLimit - promptTokens);
  }

  /**
   * What a chat request renders and is fingerprinted as (validated; throws GatewayError): computed
   * before the session lookup, which fetches the capture row it extends in the same round trip.
   */
  private chatInput(req: ChatRequest): ChatInput {
    if (req.top_logprobs !== null && req.top_logprobs !== undefined && req.top_logprobs > 0 && req.logprobs !== true) {
      throw GatewayError.invalid('top_logprobs needs logprobs: true', 'top_logprobs');
    }
    const tools = toToolDefinitions(req.tools);
    const toolChoice = req.tool_choice ?? undefined;
    if (toolChoice && typeof toolChoice === 'object' && !tools?.some((t) => t.function.name === toolChoice.function.name)) {
      throw GatewayError.invalid(`tool_choice names \`${toolChoice.function.name}\`, which is not among the tools`, 'tool_choice');
    }
    if (toolChoice === 'required' && !tools) throw GatewayError.invalid('tool_choice "required" needs tools', 'tool_choice');
    const messages = toChatMessages(req.messages);
    const extra = req.chat_template_kwargs ?? {};
    const parallelToolCalls = req.parallel_tool_calls !== false;
    return { messages, tools, toolChoice, parallelToolCalls, extra, fingerprints: fingerprintMessages(messages, tools, extra) };
  }

  private async prepareChat(
    session: GatewaySession,
    req: ChatRequest,
    receivedAt: number,
    input: ChatInput = this.chatInput(req),
    match?: CaptureRow | null,
  ): Promise<PreparedCall> {
    const { model, n, stop, sampling, contextLimit } = this.common(session, req);
    const { messages, tools, toolChoice, parallelToolCalls, extra, fingerprints } = input;
    let plan: PlannedPrompt;
    try {
      plan = await planPrompt({
        format: model.format,
        store: this.d.captures,
        sessionId: session.id,
        isFirstCall: session.callCount === 0,
        messages,
        tools,
        extra,
        fingerprints,
        match,
        renders: this.renders,
      });
    } catch (err) {
      if (err instanceof ChatTemplateError)
        throw new GatewayError(
          'unrenderable',
          `the messages cannot be rendered with this model's chat template: ${err.message}`,
          'unprocessable_messages',
          'messages',
        );
      throw err;
    }
    const forced = forcedToolCall(model, toolChoice, tools, { messages: plan.messages, extra });
    const forcedText = forced.text;
    if (forcedText)
      plan = { ...plan, promptIds: [...plan.promptIds, ...model.format.tokenizer.encode(forcedText)], text: plan.text + forcedText };
    const maxTokens = this.limits(plan.promptIds.length, contextLimit, req.max_completion_tokens ?? req.max_tokens);
    return {
      kind: 'chat',
      forcedText,
      ...(forced.constraint ? { constraint: forced.constraint } : {}),
      stream: req.stream === true,
      includeUsage: req.stream_options?.include_usage === true,
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
      parallelToolCalls,
      extra,
      messages,
      fingerprint: fingerprints[fingerprints.length - 1],
    };
  }

  /** /v1/completions: the prompt is text (encoded as is, no template) or token ids; every call starts its own branch. */
  private async prepareCompletion(session: GatewaySession, req: CompletionRequest, receivedAt: number): Promise<PreparedCall> {
    const { model, n, stop, sampling, contextLimit } = this.common(session, req);
    const tok = model.format.tokenizer;
    let promptIds: number[];
    if (typeof req.prompt === 'string' || typeof req.prompt[0] === 'string') {
      const text = typeof req.prompt === 'string' ? req.prompt : (req.prompt[0] as string);
      if (text.length === 0) throw GatewayError.invalid('prompt must not be empty', 'prompt');
      promptIds = tok.encode(text);
    } else {
      promptIds = req.prompt as number[];
      if (promptIds.some((id) => id >= tok.vocabSize))
        throw GatewayError.invalid(`prompt token ids must be below ${tok.vocabSize}`, 'prompt');
    }
    const maxTokens = this.limits(promptIds.length, contextLimit, req.max_tokens ?? 16);
    const plan: PlannedPrompt = {
      promptIds,
      messages: [],
      parent: null,
      reusedTokens: 0,
      branchCause: 'no-matching-call',
      promptOpensThink: false,
      text: '',
    };
    return {
      kind: 'completion',
      stream: req.stream === true,
      includeUsage: req.stream_options?.include_usage === true,
      requestId: randomUUID(),
      receivedAt,
      session,
      model,
      plan,
      branchId: newBranchId(),
      callIds: Array.from({ length: n }, () => `call_${randomUUID()}`),
      forcedText: '',
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

  /** Staleness gating of the session's first call (over_capacity, 429 + Retry-After, when over capacity). */
  private async admit(call: PreparedCall): Promise<void> {
    if (call.session.policyVersionAtStart !== null) return;
    const admission = await this.d.gate.admit(call.session.id);
    if (!admission.admitted) {
      this.d.metrics.backpressure.inc();
      throw StalenessGate.refusal(admission, this.d.config.MAX_STALENESS, this.d.config.GATEWAY_RETRY_AFTER_S);
    }
  }

  /** Generates the n choices in parallel; `onText(index, text)` sees each one's text as it grows. */
  private async generate(
    call: PreparedCall,
    opts: { signal: AbortSignal; onText?: (index: number, text: string) => void },
  ): Promise<GenerationResult[]> {
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
        ...(call.constraint ? { constraint: call.constraint } : {}),
        // The session's choice (its task set's): finish on the old weights or abort and resume under the new ones.
        ...(call.session.weightSwap ? { weightSwap: call.session.weightSwap } : {}),
      };
      try {
        return await runGeneration({
          client: this.d.client,
          request,
          tokenizer: call.model.format.tokenizer,
          stop: call.stop,
          signal,
          onText: opts.onText && ((t) => opts.onText?.(index, t)),
        });
      } catch (err) {
        if (!failFast.signal.aborted && !opts.signal.aborted && !(err instanceof InferenceProxyError && err.status < 500))
          this.d.logger.warn('generation failed at the inference-proxy', { sessionId: call.session.id, err });
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
  private async record(
    call: PreparedCall,
    generations: GenerationResult[],
    sessionState?: CallHooks['sessionState'],
  ): Promise<ChoiceResult[]> {
    const { session, plan } = call;
    const fmt = call.model.format;
    const replies = generations.map((g, i) =>
      call.kind === 'chat'
        ? buildAssistantReply(call.forcedText + g.text, {
            format: fmt,
            tools: call.tools,
            toolChoice: call.toolChoice,
            parallelToolCalls: call.parallelToolCalls,
            promptOpensThink: plan.promptOpensThink,
            idSeed: call.callIds[i],
          })
        : null,
    );
    const branchId = call.branchId;
    const finishedAt = Date.now();
    const finishReasons = generations.map((g, i) =>
      g.finishReason === 'stop' && replies[i]?.hasToolCalls ? 'tool_calls' : g.finishReason === 'stop' ? 'stop' : 'length',
    );
    const results = (firstTurn: number): ChoiceResult[] =>
      generations.map((g, i) => ({
        index: i,
        callId: call.callIds[i],
        generation: g,
        reply: replies[i],
        finishReason: finishReasons[i],
        turnIndex: firstTurn + i,
        branchId,
      }));
    // The turn index is not part of any session state row, so the rows are built before it is known.
    const state = sessionState?.(call, results(session.callCount)) ?? [];
    if (this.d.config.GATEWAY_CAPTURE === 'off') {
      // Capture off: nothing is recorded, so no turn is reserved and no capture state written
      // (see config.ts); turn indexes are then only what the session had counted before.
      this.d.metrics.records.inc({ outcome: 'skipped' }, generations.length);
      if (state.length > 0 && !(await this.storeState(session, state)))
        throw new GatewayError('gone', 'this session was closed while the call ran', 'session_closed');
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
        ...(g.constrained ? { constrained: g.constrained } : {}),
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
              replyFingerprint: call.fingerprint
                ? appendFingerprint(call.fingerprint, reply.message)
                : (fingerprintMessages([...plan.messages, reply.message], call.tools, call.extra).at(-1) as string),
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
      recorded = await this.d.recorder.record(session, call.model.name, answered, {
        newBranches: plan.parent ? 0 : 1,
        parent: plan.parent,
        responses: state,
      });
    } catch (err) {
      this.d.metrics.records.inc({ outcome: 'failed' }, answered.length);
      if (err instanceof RecordNotDurableError) {
        this.d.logger.error('record not durable; answering an error', { sessionId: session.id, err });
        throw new GatewayError('unavailable', 'the call could not be recorded durably, so it is not answered; retry', 'record_unavailable');
      }
      throw err;
    }
    if (!recorded) throw new GatewayError('gone', 'this session was closed while the call ran; it was not recorded', 'session_closed');
    this.d.metrics.records.inc({ outcome: 'durable' }, answered.length);
    this.d.metrics.capture.inc({ kind: plan.parent ? 'extend' : 'branch', reason: plan.branchCause ?? 'extends' });
    this.d.metrics.tokens.inc({ kind: 'prompt' }, plan.promptIds.length * answered.length);
    this.d.metrics.tokens.inc({ kind: 'reused_prompt' }, plan.reusedTokens * answered.length);
    this.d.metrics.tokens.inc(
      { kind: 'output' },
      generations.reduce((s, g) => s + g.outputIds.length, 0),
    );
    return results(recorded.firstTurn);
  }

  /** Session state written on its own (capture off); false when the session was closed meanwhile. */
  private async storeState(session: GatewaySession, state: SessionStateRow[]): Promise<boolean> {
    try {
      return await this.d.recorder.storeOnly(session.id, state);
    } catch (err) {
      if (err instanceof RecordNotDurableError)
        throw new GatewayError(
          'unavailable',
          'the response could not be stored durably, so it is not answered; retry',
          'record_unavailable',
        );
      throw err;
    }
  }
}

const newBranchId = () => `branch_${randomUUID()}`;

/**
 * A failed generation as the agent should see it: what the engine refused, what is
 * unavailable, what failed, never an internal address (the proxy's messages name replicas by
 * URL: they are redacted here, and the whole error is logged).
 */
function generationError(err: unknown, clientGone: boolean): GatewayError {
  if (err instanceof GatewayError) return err;
  if (clientGone) return new GatewayError('client_closed', 'the client went away', 'client_closed');
  if (err instanceof InferenceProxyError) {
    const detail = withoutAddresses(err.body.error.message);
    if (err.status === 400 || err.status === 422)
      return new GatewayError('invalid_request', `the inference engine refused the request: ${detail}`, err.code ?? 'backend_rejected');
    if (err.status === 503 || err.status === 429)
      return new GatewayError('unavailable', `inference unavailable: ${detail}`, err.code ?? 'backend_unavailable');
    return new GatewayError('inference_failed', `inference failed: ${detail}`, err.code ?? 'backend_error');
  }
  // A transport failure (connection refused, reset, timeout): its message names the proxy's
  // address, which is none of the agent's business; the log has it.
  return new GatewayError('inference_failed', 'inference failed: the inference-proxy could not be reached', 'backend_unreachable');
}

/** URLs and host:port pairs (replica addresses in the proxy's messages) replaced by a placeholder. */
export const withoutAddresses = (text: string): string =>
  text
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s,;)]*[^\s,;):]/gi, '<replica>')
    .replace(/\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-f:]+\](?::\d+)?|\blocalhost:\d+\b/gi, '<address>');
