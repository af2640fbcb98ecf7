import type { GatewaySession } from '@anvil/persistence';
import type { Logger } from '@anvil/observability';
import type { CallRecorder } from '../capture/call-recorder';
import { RecordNotDurableError } from '../capture/call-recorder';
import type { SessionStateRow } from '../capture/record-committer';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import type { GenerationResult } from '../generation/generation-runner';
import type { GatewayMetrics } from '../metrics';
import { assembleAnswer, type ChoiceResult } from './answer-assembly';
import { answeredCalls } from './answered-calls';
import type { CallHooks } from './call-request';
import type { PreparedCall } from './prepared-call';

export interface CallRecordingDeps {
  config: Partial<Pick<GatewayConfig, 'GATEWAY_CAPTURE'>>;
  recorder: CallRecorder;
  metrics: GatewayMetrics;
  logger: Logger;
}

/** A generated call made durable before it is answered: its events, the capture state it leaves, and the session state the answer depends on. */
export class CallRecording {
  constructor(private readonly d: CallRecordingDeps) {}

  /** Turns generations into the choices answered and records them durably (throws a GatewayError instead when that fails). */
  async record(call: PreparedCall, generations: GenerationResult[], sessionState?: CallHooks['sessionState']): Promise<ChoiceResult[]> {
    const { session, plan } = call;
    const answer = assembleAnswer(call, generations);
    const finishedAt = Date.now();
    // The turn index is not part of any session state row, so the rows are built before it is known.
    const state = sessionState?.(call, answer.choices(session.callCount)) ?? [];
    if (this.d.config.GATEWAY_CAPTURE === 'off') {
      // Capture off: nothing is recorded, so no turn is reserved and no capture state written
      // (see config.ts); turn indexes are then only what the session had counted before.
      this.d.metrics.records.inc({ outcome: 'skipped' }, generations.length);
      if (state.length > 0 && !(await this.storeState(session, state)))
        throw new GatewayError('gone', 'this session was closed while the call ran', 'session_closed');
      return answer.choices(session.callCount);
    }
    const answered = answeredCalls(call, generations, answer, finishedAt);
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
    return answer.choices(recorded.firstTurn);
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
