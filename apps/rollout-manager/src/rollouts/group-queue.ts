import { randomUUID } from 'node:crypto';
import type { Logger } from '@anvil/observability';
import type { GroupRow, GroupStatus, RolloutRow, RolloutStateStore } from '../state-store';
import type { StoredTask } from '../tasks/jsonl';
import type { TaskSetSpec } from '../tasks/task-set';
import type { GroupState } from './group-state';
import type { Recovered } from './recovery';

/** A member of an admitted group, waiting for a slot. */
export interface ReadyRollout {
  group: GroupState;
  rollout: RolloutRow;
}

const terminal = (status: GroupStatus) => status === 'trained' || status === 'dropped';

/**
 * The rollout groups this manager holds in memory and the three lines they wait in: train groups
 * for admission (in submission order), eval groups (admitted first, at their pinned version), and
 * the members of admitted groups for a slot. A group's state changes are written to rm_groups in
 * the order they were made.
 */
export class GroupQueue {
  /** Open groups by id: train groups until trained or dropped, eval groups until they finish. */
  private readonly open = new Map<string, GroupState>();
  /** Train groups waiting for admission. */
  readonly train: GroupState[] = [];
  /** Eval groups waiting for admission. */
  readonly evals: GroupState[] = [];
  /** Members of admitted groups waiting for a slot, in start order. */
  readonly ready: ReadyRollout[] = [];

  constructor(
    private readonly state: RolloutStateStore,
    private readonly logger: Logger,
  ) {}

  /** One group of G per task, in order, with queue positions in that order; written in one transaction, then held (not queued yet). */
  async create(spec: TaskSetSpec, tasks: StoredTask[], G: number, purpose: 'train' | 'eval', evalId: string | null): Promise<GroupState[]> {
    const positions = await this.state.queuePositions(tasks.length * G);
    const groups = tasks.map((task, t): GroupState => {
      const groupId = `${purpose === 'eval' ? 'eval:' : ''}${randomUUID()}`;
      const row: GroupRow = {
        id: groupId,
        taskId: task.id,
        taskSetId: spec.id,
        groupSize: G,
        purpose,
        evalId,
        status: 'queued',
        startVersion: null,
      };
      const members: RolloutRow[] = Array.from({ length: G }, (_, i) => ({
        id: `${groupId}.${i}`,
        groupId,
        taskId: task.id,
        sampleIndex: i,
        queuePosition: positions[t * G + i],
        status: 'queued',
        sessionId: null,
        policyVersionAtStart: null,
        attempts: 0,
      }));
      return { row, task, spec, members, pending: G, submittedAt: Date.now() };
    });
    await this.state.insertGroups(groups.map((g) => ({ group: g.row, rollouts: g.members })));
    for (const g of groups) this.open.set(g.row.id, g);
    return groups;
  }

  /** What a previous process left, as recovery found it. */
  restore(rec: Recovered): void {
    for (const g of rec.groups) this.open.set(g.row.id, g);
    for (const g of rec.queued) this.train.push(g);
    for (const r of rec.ready) this.ready.push(r);
  }

  /** A train group whose state events may still change: held, not trained, not dropped. */
  trainGroup(id: string): GroupState | undefined {
    const g = this.open.get(id);
    return g && g.row.purpose === 'train' && !terminal(g.row.status) ? g : undefined;
  }

  /** Admitted at `version`: running, its queued members in line for a slot. */
  admit(g: GroupState, version: number): void {
    g.row.status = 'running';
    g.row.startVersion = version;
    void this.write(g, 'running', version).catch(() => undefined);
    for (const m of g.members) if (m.status === 'queued') this.ready.push({ group: g, rollout: m });
  }

  /** A member's outcome is out: true when that finished its running group (an eval group is then let go). */
  rolloutDone(g: GroupState, r: RolloutRow): boolean {
    r.status = 'completed';
    g.pending--;
    const groupDone = g.pending === 0 && g.row.status === 'running';
    if (groupDone) {
      g.row.status = 'finished';
      if (g.row.purpose === 'eval') this.open.delete(g.row.id);
    }
    return groupDone;
  }

  /** A finished group's state: an eval group ends dropped (it is never trained on), a train group waits for its batch. */
  writeFinished(g: GroupState): Promise<void> {
    return this.write(g, g.row.purpose === 'eval' ? 'dropped' : 'finished');
  }

  /**
   * Environment failures the Data Pool asks to run again: new members of the same group and
   * sample index (`<id>.retryN`), the group queued for admission again. False when none of the
   * ids is a member (nothing queued).
   */
  async requeue(g: GroupState, retryRolloutIds: string[]): Promise<boolean> {
    const retries: RolloutRow[] = [];
    const positions = await this.state.queuePositions(retryRolloutIds.length);
    for (const id of retryRolloutIds) {
      const old = g.members.find((m) => m.id === id);
      if (!old) continue;
      const n = g.members.filter((m) => m.id.startsWith(`${id}.retry`)).length + 1;
      retries.push({
        ...old,
        id: `${id}.retry${n}`,
        queuePosition: positions[retries.length],
        status: 'queued',
        sessionId: null,
        policyVersionAtStart: null,
        attempts: 0,
      });
    }
    if (retries.length === 0) return false;
    await this.state.insertRollouts(retries);
    g.members.push(...retries);
    g.pending += retries.length;
    g.row.status = 'queued';
    await this.write(g, 'queued');
    this.train.push(g);
    return true;
  }

  /** Trained or dropped: written, and no longer held. */
  async close(g: GroupState, status: 'trained' | 'dropped'): Promise<void> {
    g.row.status = status;
    await this.write(g, status);
    this.open.delete(g.row.id);
  }

  /** Rollouts not started yet: in line for a slot, or members of groups waiting for admission. */
  queuedCount(): number {
    let n = this.ready.length;
    for (const g of [...this.train, ...this.evals]) n += g.members.filter((m) => m.status === 'queued').length;
    return n;
  }

  /** Whether anything waits in any line. */
  get waiting(): boolean {
    return this.train.length > 0 || this.evals.length > 0 || this.ready.length > 0;
  }

  /** The rollouts that will start next, in the order they will (ready, then eval groups, then train groups). */
  *upcoming(): Generator<ReadyRollout> {
    yield* this.ready;
    for (const g of [...this.evals, ...this.train]) for (const m of g.members) if (m.status === 'queued') yield { group: g, rollout: m };
  }

  /** Group state writes in order per group (admission, finish, trained may follow each other closely). */
  private write(g: GroupState, status: GroupStatus, startVersion?: number): Promise<void> {
    const next = (g.writes ?? Promise.resolve()).then(() => this.state.setGroup(g.row.id, status, startVersion));
    g.writes = next.catch((err: unknown) => this.logger.error('group state write failed', { groupId: g.row.id, status, err }));
    return next;
  }
}
