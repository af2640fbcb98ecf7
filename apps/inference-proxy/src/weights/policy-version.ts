import type { LoadWeightsRequest } from '../backends/backend';

/** The policy version the deployment serves: every token started from now on is stamped with it. */
export class PolicyVersionState {
  checkpointUri: string | null = null;
  /** What the active version's checkpoint is (a whole model or an adapter over a base): a replica that missed it loads the same. */
  loaded: LoadWeightsRequest | null = null;
  /** Versions whose policy_version.activated went out (a redelivery re-publishes a lost one). */
  readonly announced = new Set<number>();

  constructor(public current: number) {}
}
