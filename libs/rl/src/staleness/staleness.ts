// Rollout admission under a staleness bound η, both forms peers use, in one controller:
//  - count bound (AReaL/SkyRL capacity): groups in flight + finished but not yet trained ≤ (η + 1)·B,
//    B = groups per optimizer step;
//  - version bound: current version − oldest in-flight start version ≤ η (versionBoundAdmits, the
//    one rule the gateway's first-call gate also calls).
// Trained AND dropped (filtered) groups release capacity; a peer's producers deadlocked when
// filtered groups did not (SkyRL PR #1802). A trained group releases its capacity once the version
// its batch produced serves (trained(id, { releaseAtVersion, currentVersion }), then activated(v)):
// released at the train event, the slot went to a group that started on the weights the batch had
// just replaced, and a synchronous run (η = 0) trained 37.5% of its tokens one version old.
// Counters are rebuilt from durable state on resume.

export interface StalenessConfig {
  /** η: maximum policy versions a rollout may lag (integer >= 0). */
  eta: number;
  /** B: groups consumed per optimizer step (integer >= 1). */
  groupsPerStep: number;
}

/** Bad staleness input; `field` names it. */
export class StalenessInputError extends Error {
  override name = 'StalenessInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

function nonNegativeInt(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw new StalenessInputError(field, `must be an integer >= 0, got ${String(v)}`);
  return v;
}

function groupIdOf(v: unknown, field: string): string {
  if (typeof v !== 'string' || v === '') throw new StalenessInputError(field, 'must be a non-empty string');
  return v;
}

/**
 * The version bound, shared by the rollout manager (through StalenessController) and the
 * gateway's first-call gate: a new rollout would start at `currentVersion`; it is admitted iff no
 * in-flight rollout started more than η versions ago, i.e. oldest === null (nothing in flight) or
 * currentVersion − oldestInFlightStartVersion ≤ η. With η = 1 at version 5: oldest 4 admits, 3 refuses.
 */
export function versionBoundAdmits(currentVersion: number, oldestInFlightStartVersion: number | null, eta: number): boolean {
  nonNegativeInt(currentVersion, 'currentVersion');
  nonNegativeInt(eta, 'eta');
  if (oldestInFlightStartVersion === null) return true;
  nonNegativeInt(oldestInFlightStartVersion, 'oldestInFlightStartVersion');
  if (oldestInFlightStartVersion > currentVersion)
    throw new StalenessInputError(
      'oldestInFlightStartVersion',
      `${oldestInFlightStartVersion} is ahead of currentVersion ${currentVersion} (a rollout cannot start at a version that does not exist yet)`,
    );
  return currentVersion - oldestInFlightStartVersion <= eta;
}

export type AdmitResult =
  { admitted: true; alreadyAdmitted?: boolean } | { admitted: false; reason: 'capacity' | 'version'; detail: string };

export interface StalenessSnapshot {
  inFlight: { groupId: string; startVersion: number }[];
  untrained: string[];
  /** Trained groups holding capacity until the version their batch produced serves. */
  awaitingVersion: { groupId: string; version: number }[];
  /** (η + 1)·B */
  capacity: number;
}

export class StalenessController {
  readonly capacity: number;
  private readonly eta: number;
  private readonly inFlight = new Map<string, number>(); // groupId -> start version
  private readonly untrained = new Set<string>();
  /** Trained groups whose batch's version is not serving yet: groupId -> that version. They still count. */
  private readonly awaitingVersion = new Map<string, number>();
  private refusedCapacity = 0;
  private refusedVersion = 0;

  constructor(cfg: StalenessConfig) {
    if (!cfg || typeof cfg !== 'object') throw new StalenessInputError('cfg', 'must be an object');
    this.eta = nonNegativeInt(cfg.eta, 'cfg.eta');
    const b = nonNegativeInt(cfg.groupsPerStep, 'cfg.groupsPerStep');
    if (b < 1) throw new StalenessInputError('cfg.groupsPerStep', 'must be >= 1');
    this.capacity = (this.eta + 1) * b;
  }

  /** Groups counted against capacity: in flight + finished but untrained + trained into a version not serving yet. */
  get used(): number {
    return this.inFlight.size + this.untrained.size + this.awaitingVersion.size;
  }

  /** The oldest start version among in-flight groups (null when none). */
  get oldestInFlightStartVersion(): number | null {
    let min: number | null = null;
    for (const v of this.inFlight.values()) if (min === null || v < min) min = v;
    return min;
  }

  /** Refusals so far, by reason (for metrics). */
  get refusals(): { capacity: number; version: number } {
    return { capacity: this.refusedCapacity, version: this.refusedVersion };
  }

  /**
   * Admits group `groupId` to start at `currentVersion`, or says why not. Re-admitting a group
   * already in flight is idempotent ({ admitted: true, alreadyAdmitted: true }, nothing counted twice);
   * re-admitting a finished, untrained group is an error.
   */
  tryAdmit(groupId: string, currentVersion: number): AdmitResult {
    groupIdOf(groupId, 'groupId');
    nonNegativeInt(currentVersion, 'currentVersion');
    if (this.inFlight.has(groupId)) return { admitted: true, alreadyAdmitted: true };
    if (this.untrained.has(groupId))
      throw new StalenessInputError('groupId', `group ${groupId} already finished generation; it cannot be admitted again`);
    if (this.used >= this.capacity) {
      this.refusedCapacity++;
      return {
        admitted: false,
        reason: 'capacity',
        detail: `${this.inFlight.size} in flight + ${this.untrained.size} untrained + ${this.awaitingVersion.size} trained into a version not serving yet = ${this.used} groups, capacity (η + 1)·B = ${this.capacity}`,
      };
    }
    const oldest = this.oldestInFlightStartVersion;
    if (!versionBoundAdmits(currentVersion, oldest, this.eta)) {
      this.refusedVersion++;
      return {
        admitted: false,
        reason: 'version',
        detail: `current version ${currentVersion} − oldest in-flight start version ${oldest} = ${currentVersion - (oldest ?? currentVersion)} > η = ${this.eta}`,
      };
    }
    this.inFlight.set(groupId, currentVersion);
    return { admitted: true };
  }

  /** Generation done, not yet trained: leaves the version bound, still counts toward capacity. Idempotent; unknown groups are an error. */
  finished(groupId: string): void {
    groupIdOf(groupId, 'groupId');
    if (this.untrained.has(groupId)) return;
    if (!this.inFlight.delete(groupId)) throw new StalenessInputError('groupId', `group ${groupId} was never admitted`);
    this.untrained.add(groupId);
  }

  /**
   * The group was trained on: releases its capacity, at once or, given `version` (the version its
   * batch produced and the one serving now), when that version serves (activated()). Returns false
   * when it held none (already released or never admitted: redelivered events are harmless).
   */
  trained(groupId: string, version?: { releaseAtVersion: number; currentVersion: number }): boolean {
    groupIdOf(groupId, 'groupId');
    if (this.inFlight.has(groupId))
      throw new StalenessInputError('groupId', `group ${groupId} is still in flight; it cannot have been trained`);
    if (version !== undefined) {
      const at = nonNegativeInt(version.releaseAtVersion, 'version.releaseAtVersion');
      const now = nonNegativeInt(version.currentVersion, 'version.currentVersion');
      if (at > now && this.untrained.delete(groupId)) {
        this.awaitingVersion.set(groupId, at);
        return true;
      }
    }
    return this.untrained.delete(groupId);
  }

  /** Version `version` serves now: trained groups waiting for it (or an older one) release their capacity. Returns how many did. */
  activated(version: number): number {
    nonNegativeInt(version, 'version');
    let released = 0;
    for (const [id, at] of this.awaitingVersion)
      if (at <= version) {
        this.awaitingVersion.delete(id);
        released++;
      }
    return released;
  }

  /** The group was filtered out or abandoned (in flight or finished): releases its capacity. Returns false when it held none. */
  dropped(groupId: string): boolean {
    groupIdOf(groupId, 'groupId');
    return this.inFlight.delete(groupId) || this.untrained.delete(groupId) || this.awaitingVersion.delete(groupId);
  }

  snapshot(): StalenessSnapshot {
    return {
      inFlight: [...this.inFlight.entries()].map(([groupId, startVersion]) => ({ groupId, startVersion })),
      untrained: [...this.untrained],
      awaitingVersion: [...this.awaitingVersion.entries()].map(([groupId, version]) => ({ groupId, version })),
      capacity: this.capacity,
    };
  }

  /**
   * Rebuilds the counters from durable state (groups admitted and not settled: in flight with
   * their start versions; finished but not trained). A state over capacity is accepted (for
   * example after η was lowered): admissions simply wait until enough groups are released.
   */
  static restore(
    cfg: StalenessConfig,
    state: {
      inFlight: { groupId: string; startVersion: number }[];
      untrained: string[];
      awaitingVersion?: { groupId: string; version: number }[];
    },
  ): StalenessController {
    const c = new StalenessController(cfg);
    if (!state || !Array.isArray(state.inFlight) || !Array.isArray(state.untrained))
      throw new StalenessInputError('state', 'must have inFlight and untrained arrays');
    state.inFlight.forEach((g, i) => {
      const id = groupIdOf(g?.groupId, `state.inFlight[${i}].groupId`);
      const v = nonNegativeInt(g?.startVersion, `state.inFlight[${i}].startVersion`);
      if (c.inFlight.has(id)) throw new StalenessInputError(`state.inFlight[${i}].groupId`, `duplicate group ${id}`);
      c.inFlight.set(id, v);
    });
    state.untrained.forEach((g, i) => {
      const id = groupIdOf(g, `state.untrained[${i}]`);
      if (c.inFlight.has(id) || c.untrained.has(id)) throw new StalenessInputError(`state.untrained[${i}]`, `group ${id} listed twice`);
      c.untrained.add(id);
    });
    (state.awaitingVersion ?? []).forEach((g, i) => {
      const id = groupIdOf(g?.groupId, `state.awaitingVersion[${i}].groupId`);
      const v = nonNegativeInt(g?.version, `state.awaitingVersion[${i}].version`);
      if (c.inFlight.has(id) || c.untrained.has(id) || c.awaitingVersion.has(id))
        throw new StalenessInputError(`state.awaitingVersion[${i}].groupId`, `group ${id} listed twice`);
      c.awaitingVersion.set(id, v);
    });
    return c;
  }
}

export interface TokenStaleness {
  /** Mean of trainerVersion − token version. */
  mean: number;
  max: number;
  /** Share of tokens more than k versions behind the trainer. */
  shareOlderThanK: number;
  tokens: number;
}

/** Per-token staleness of a batch (versions behind the trainer). Zero tokens give zeros with tokens = 0. */
export function tokenStaleness(versions: ArrayLike<number>[], trainerVersion: number, k: number): TokenStaleness {
  nonNegativeInt(trainerVersion, 'trainerVersion');
  nonNegativeInt(k, 'k');
  if (!Array.isArray(versions)) throw new StalenessInputError('versions', 'must be an array of per-sample version arrays');
  let n = 0;
  let sum = 0;
  let max = 0;
  let older = 0;
  versions.forEach((vs, i) => {
    if (!vs || typeof vs.length !== 'number') throw new StalenessInputError(`versions[${i}]`, 'must be an array-like of versions');
    for (let t = 0; t < vs.length; t++) {
      const v = vs[t];
      if (!Number.isInteger(v) || v < 0) throw new StalenessInputError(`versions[${i}][${t}]`, `must be an integer >= 0, got ${v}`);
      if (v > trainerVersion)
        throw new StalenessInputError(`versions[${i}][${t}]`, `version ${v} is newer than trainerVersion ${trainerVersion}`);
      const s = trainerVersion - v;
      n++;
      sum += s;
      if (s > max) max = s;
      if (s > k) older++;
    }
  });
  return n === 0 ? { mean: 0, max: 0, shareOlderThanK: 0, tokens: 0 } : { mean: sum / n, max, shareOlderThanK: older / n, tokens: n };
}
