import type { InferenceProxyClient } from '@anvil/inference-client';
import type { Logger } from '@anvil/observability';
import type { SessionAuthenticator } from '../auth/session-auth';
import type { CallRecorder } from '../capture/call-recorder';
import type { CaptureStore } from '../capture/capture-store';
import type { GatewayConfig } from '../config';
import type { GatewayMetrics } from '../metrics';
import type { ModelRegistry } from '../models/model-registry';
import type { CallLimitGate } from '../sessions/call-limit-gate';
import type { SessionStore } from '../sessions/session-store';
import type { StalenessGate } from '../sessions/staleness-gate';
import type { ChoiceResult } from './answer-assembly';
import { CallAdmission } from './call-admission';
import { CallPreparation } from './call-preparation';
import { CallRecording } from './call-recording';
import type { CallHooks, CallRequest } from './call-request';
import { generateChoices } from './choice-generation';
import type { PreparedCall } from './prepared-call';

export type { ChoiceResult } from './answer-assembly';
export type { CallHooks, CallRequest } from './call-request';
export type { ChatInput } from './chat-input';
export { withoutAddresses } from './generation-error';

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
 * The path of every answered call, in one place (`answer`): prepare (validate, authenticate
 * with the capture row the call extends in the same round trip, plan the prompt: token-exact
 * extension or a new branch) → admit (staleness, then the session's call limits) → generate n
 * choices → record them durably. Each step is its own room (call-preparation, call-admission,
 * choice-generation, call-recording); this composes them.
 * The HTTP layer (JSON or SSE) only shapes what this returns; failures are GatewayErrors, which
 * the edge maps onto statuses.
 */
export class CallService {
  private readonly preparation: CallPreparation;
  private readonly admission: CallAdmission;
  private readonly recording: CallRecording;

  constructor(private readonly d: CallServiceDeps) {
    this.preparation = new CallPreparation(d);
    this.admission = new CallAdmission(d);
    this.recording = new CallRecording(d);
  }

  async answer(req: CallRequest, hooks: CallHooks = {}): Promise<{ call: PreparedCall; choices: ChoiceResult[] }> {
    const call = await this.preparation.prepare(req);
    const admitted = await this.admission.admit(call);
    try {
      const onText = hooks.prepared?.(call) ?? undefined;
      const generations = await generateChoices(this.d, call, { signal: req.signal, onText });
      return { call, choices: await this.recording.record(call, generations, hooks.sessionState) };
    } catch (err) {
      // Not answered (failed, or the agent gone): its calls go back to the budget.
      await admitted.release();
      throw err;
    }
  }
}
