import type { DataSource, EntityManager } from 'typeorm';
import { createEvent } from '@anvil/contracts';
import type { Outbox } from '@anvil/persistence';
import type { AdvantageConfig, FilterConfig, FilterResult } from '@anvil/rl';
import { groupAdvantages } from './group-advantages';
import { filterWave } from './group-filters';
import { GroupWave, readMembers } from './group-wave';
import { closeGroup, closeReopened, lockOpenGroup, markDropped, writeTrajectories, type OpenGroup } from './group-writes';
import { readyTrajectories } from './ready-trajectories';

export interface SettlementConfig {
  runId: string;
  producer: string;
  advantage: AdvantageConfig;
  filters: FilterConfig;
  callWaitMs: number;
  groupTimeoutMs: number;
  /** Trajectories per train batch: reinforce_pp's batch std spans about this many (absent: the group alone). */
  batchTrajectories?: number;
}

export interface SettlementHooks {
  onSettled?: (status: 'ready' | 'dropped', reason: string | null) => void;
  onDropped?: (reason: string) => void;
}

/** What one settled wave reports to the hooks once its transaction committed. */
interface SettledWave {
  status: 'ready' | 'dropped';
  reason: string | null;
  /** The reason kind (before its ':') of each rollout dropped in this wave. */
  drops: string[];
}

/** Open groups read per round at most; the rest wait for the next round. */
const MAX_GROUPS_PER_ROUND = 500;

/**
 * Settles rollout groups: assembles their trajectories, applies libs/rl's filters (compact
 * filtering, environment failures dropped and sent back for retry up to maxEnvRetries, aborted
 * rollouts dropped, over-long outputs masked or kept, zero-variance drop), computes advantages
 * with the run's estimator, and publishes trajectory.ready and rollout_group.settled through
 * the outbox, in one transaction per group.
 *
 * A group settles in waves. The rollout manager answers retryRolloutIds with new rollouts of the
 * same group and sample index; their rollout.started reopens the group (ingestion), and the next
 * settlement handles only the rows not settled yet (data_pool_queue.settled_at). A retry replaces
 * the failure it retries (a later row of the same sample index; its attempt number counts the
 * failures before it, so maxEnvRetries caps the chain), and the rewards of members settled in an
 * earlier wave stay in the statistics (their trajectories, published then, keep the advantages
 * they were published with; members dropped with their group are not revived).
 */
export class GroupSettlement {
  constructor(
    private readonly ds: DataSource,
    private readonly outbox: Outbox,
    private readonly cfg: SettlementConfig,
    private readonly hooks: SettlementHooks = {},
  ) {}

  /** Settles every group that can settle now; returns how many settled and how many rollouts were dropped. */
  async settleGroups(now: number): Promise<{ groups: number; dropped: number }> {
    let n = 0;
    let dropped = 0;
    for (const groupId of await this.candidates(now)) {
      const r = await this.settle(groupId, now);
      if (r) {
        n++;
        dropped += r.dropped;
      }
    }
    return { groups: n, dropped };
  }

  /**
   * Only groups that may settle now: timed out, or every member queued and none of the unsettled
   * ones still running. Open groups include every group submitted but not yet run (hundreds), and
   * reading each one's rollouts every round would cost a query per open group per round. settle()
   * still decides (it also waits for calls still arriving).
   */
  private async candidates(now: number): Promise<string[]> {
    const groups: { group_id: string }[] = await this.ds.query(
      `SELECT g."group_id" FROM "data_pool_groups" g
       WHERE g."run_id" = $1 AND g."status" = 'open'
         AND (g."opened_at" < to_timestamp($2::float8 / 1000)
              OR ((SELECT count(*) FROM "data_pool_queue" q WHERE q."group_id" = g."group_id") >= g."group_size"
                  AND NOT EXISTS (SELECT 1 FROM "data_pool_queue" q LEFT JOIN "rollouts" r ON r."id" = q."rollout_id"
                                  WHERE q."group_id" = g."group_id" AND q."settled_at" IS NULL AND q."status" <> 'dropped' AND r."status" IS DISTINCT FROM 'completed')))
       ORDER BY g."opened_at" LIMIT ${MAX_GROUPS_PER_ROUND}`,
      [this.cfg.runId, now - this.cfg.groupTimeoutMs],
    );
    return groups.map((g) => g.group_id);
  }

  /**
   * Settles one group once every member has completed with all its calls (or was dropped), or
   * the group timed out. Returns null while it must wait (or when it is not open any more).
   * Reads and writes under the group row's lock (lockOpenGroup).
   */
  private async settle(groupId: string, now: number): Promise<{ dropped: number } | null> {
    let settled = null as SettledWave | null;
    await this.outbox.transaction(async (m) => {
      const group = await lockOpenGroup(m, groupId);
      if (!group) return;
      const timedOut = now - group.openedMs > this.cfg.groupTimeoutMs;
      const wave = new GroupWave(groupId, await readMembers(m, groupId), timedOut, now, this.cfg.callWaitMs);
      if (wave.mustWait(group.groupSize)) return;
      if (wave.fresh.length === 0) {
        await closeReopened(m, groupId, wave.publishedBefore() > 0);
        return;
      }
      settled = await this.settleWave(m, group, wave, now);
    });
    if (!settled) return null;
    for (const d of settled.drops) this.hooks.onDropped?.(d);
    this.hooks.onSettled?.(settled.status, settled.reason);
    return { dropped: settled.drops.length };
  }

  /** The wave's decisions and writes: filters, advantages, drops, trajectories, the group's status and the events. */
  private async settleWave(m: EntityManager, group: OpenGroup, wave: GroupWave, now: number): Promise<SettledWave> {
    const filtered = filterWave(wave, this.cfg.filters);
    const advantages = await groupAdvantages(m, wave, group, filtered.result, this.cfg);
    const ready = await readyTrajectories(m, wave, group, filtered.publish, advantages, now, this.cfg.producer);
    const dropped = wave.dropped();
    await markDropped(m, dropped);
    await writeTrajectories(m, ready.rows, group, now, advantages.difficulty);
    const { status, reason } = groupOutcome(wave, group, filtered.result, ready.ids.length);
    await closeGroup(m, group.groupId, status, reason);
    const settledEvent = createEvent(
      'rollout_group.settled',
      { groupId: group.groupId, taskId: group.taskId, status, reason, trajectoryIds: ready.ids, retryRolloutIds: filtered.retry },
      { key: group.groupId, producer: this.cfg.producer, id: `rollout_group.settled:${group.groupId}${wave.waveSuffix()}` },
    );
    await this.outbox.enqueue(m, [...ready.events, settledEvent]);
    return { status, reason, drops: dropped.map((d) => d.reason.split(':')[0]) };
  }
}

/** 'ready' while any trajectory of the group (this wave's or an earlier one's) is to be trained; the reason says why otherwise, or that it timed out. */
function groupOutcome(
  wave: GroupWave,
  group: OpenGroup,
  result: FilterResult | null,
  publishedNow: number,
): { status: 'ready' | 'dropped'; reason: string | null } {
  const publishedInAll = publishedNow + wave.publishedBefore();
  const status = publishedInAll > 0 ? 'ready' : 'dropped';
  const reason =
    result?.reason ??
    (!result && publishedInAll === 0
      ? wave.timedOut
        ? 'timeout'
        : 'no_trainable'
      : wave.timedOut
        ? `timeout: settled with ${publishedInAll} of ${group.groupSize} rollouts`
        : null);
  return { status, reason };
}
