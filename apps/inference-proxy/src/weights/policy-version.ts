/** The policy version the deployment serves: every token started from now on is stamped with it. */
export class PolicyVersionState {
  checkpointUri: string | null = null;
  /** Versions whose policy_version.activated went out (a redelivery re-publishes a lost one). */
  readonly announced = new Set<number>();

  constructor(public current: number) {}
}
