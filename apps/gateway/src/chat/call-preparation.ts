import { randomUUID } from 'node:crypto';
import type { GatewaySession } from '@anvil/persistence';
import { ChatTemplateError } from '@anvil/tokenizer';
import type { SessionAuthenticator } from '../auth/session-auth';
import type { CaptureRow, CaptureStore } from '../capture/capture-store';
import { planPrompt, type PlannedPrompt } from '../capture/prompt-planner';
import { RenderCache } from '../capture/render-cache';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import type { ModelRegistry, ServedModel } from '../models/model-registry';
import {
  chatRequestSchema,
  completionRequestSchema,
  describeSchemaError,
  type ChatRequest,
  type CompletionRequest,
} from '../openai/chat-request';
import type { CallRequest } from './call-request';
import { callSettings, maxTokensFor } from './call-settings';
import { chatInput, type ChatInput } from './chat-input';
import { forcedToolCall } from './forced-tool-call';
import type { PreparedCall } from './prepared-call';

export interface CallPreparationDeps {
  config: Pick<GatewayConfig, 'GATEWAY_DEFAULT_MAX_TOKENS' | 'GATEWAY_MAX_N'>;
  registry: ModelRegistry;
  auth: SessionAuthenticator;
  captures: CaptureStore;
}

/**
 * A request made ready to generate: validated, its session authenticated (with the capture row
 * the call extends, in the same round trip), its prompt planned (token-exact extension of an
 * earlier call or a new branch) and its limits set. Throws GatewayErrors.
 */
export class CallPreparation {
  /** Branch prompts rendered recently (the opening prompt of every rollout of a group, retries). */
  private readonly renders = new RenderCache(16_000_000);

  constructor(private readonly d: CallPreparationDeps) {}

  async prepare(req: CallRequest): Promise<PreparedCall> {
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
        input = chatInput(parsed.data);
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

  private async prepareChat(
    session: GatewaySession,
    req: ChatRequest,
    receivedAt: number,
    input: ChatInput,
    match: CaptureRow | null | undefined,
  ): Promise<PreparedCall> {
    const { model, n, stop, sampling, contextLimit } = callSettings(this.d.registry, this.d.config, session, req);
    const { messages, tools, toolChoice, parallelToolCalls, extra, fingerprints } = input;
    let plan = await this.planChat(model, session, input, match);
    const forced = forcedToolCall(model, toolChoice, tools, { messages: plan.messages, extra });
    const forcedText = forced.text;
    if (forcedText)
      plan = { ...plan, promptIds: [...plan.promptIds, ...model.format.tokenizer.encode(forcedText)], text: plan.text + forcedText };
    const requested = req.max_completion_tokens ?? req.max_tokens;
    const maxTokens = maxTokensFor(plan.promptIds.length, contextLimit, requested, this.d.config.GATEWAY_DEFAULT_MAX_TOKENS);
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
      callIds: newCallIds(n),
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

  /** The chat prompt: the call it extends token-exactly, or a new branch rendered with the model's template. */
  private async planChat(model: ServedModel, session: GatewaySession, input: ChatInput, match: CaptureRow | null | undefined) {
    try {
      return await planPrompt({
        format: model.format,
        store: this.d.captures,
        sessionId: session.id,
        isFirstCall: session.callCount === 0,
        messages: input.messages,
        tools: input.tools,
        extra: input.extra,
        fingerprints: input.fingerprints,
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
  }

  /** /v1/completions: the prompt is text (encoded as is, no template) or token ids; every call starts its own branch. */
  private prepareCompletion(session: GatewaySession, req: CompletionRequest, receivedAt: number): PreparedCall {
    const { model, n, stop, sampling, contextLimit } = callSettings(this.d.registry, this.d.config, session, req);
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
    const maxTokens = maxTokensFor(promptIds.length, contextLimit, req.max_tokens ?? 16, this.d.config.GATEWAY_DEFAULT_MAX_TOKENS);
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
      callIds: newCallIds(n),
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
}

const newBranchId = () => `branch_${randomUUID()}`;
/** One id per choice: the inference-proxy request id and the record's event id. */
const newCallIds = (n: number) => Array.from({ length: n }, () => `call_${randomUUID()}`);
