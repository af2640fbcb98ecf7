import type { GatewayConfig } from '../config';
import type { GatewayMetrics } from '../metrics';
import type { AdmittedCalls, CallLimitGate } from '../sessions/call-limit-gate';
import { StalenessGate } from '../sessions/staleness-gate';
import type { PreparedCall } from './prepared-call';

export interface CallAdmissionDeps {
  config: Pick<GatewayConfig, 'MAX_STALENESS' | 'GATEWAY_RETRY_AFTER_S'>;
  gate: StalenessGate;
  limits: CallLimitGate;
  metrics: GatewayMetrics;
}

/** The gates a prepared call passes before it is generated: the staleness bound, then the session's call budget and rate. */
export class CallAdmission {
  constructor(private readonly d: CallAdmissionDeps) {}

  /**
   * Admits the call or throws its 429 (over capacity; over the budget or rate). The calls
   * admitted go back to the budget by `release()` when they end unanswered.
   */
  async admit(call: PreparedCall): Promise<AdmittedCalls> {
    await this.admitFirstCall(call);
    // The session's call budget and rate limit: after the staleness gate, so a first call
    // waiting for capacity spends none of them.
    return this.d.limits.admit(call.session, call.callIds.length);
  }

  /** Staleness gating of the session's first call (over_capacity, 429 + Retry-After, when over capacity). */
  private async admitFirstCall(call: PreparedCall): Promise<void> {
    if (call.session.policyVersionAtStart !== null) return;
    const admission = await this.d.gate.admit(call.session.id);
    if (!admission.admitted) {
      this.d.metrics.backpressure.inc();
      throw StalenessGate.refusal(admission, this.d.config.MAX_STALENESS, this.d.config.GATEWAY_RETRY_AFTER_S);
    }
  }
}
