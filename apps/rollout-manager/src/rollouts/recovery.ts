import type { Logger } from '@anvil/observability';
import type { EventBatcher } from '../event-batcher';
import { GatewayError, type GatewayClient } from '../gateway-client';
import type { RolloutRow, RolloutStateStore } from '../state-store';
import type { RolloutTaskStore } from '../tasks/task-store';
import { completedEvent, startedEvent } from './events';
import type { GroupState, LoadedTaskSet } from './group-state';

export interface RecoveryDeps {
  state: RolloutStateStore;
  tasks: RolloutTaskStore;
  gateway: GatewayClient;
  events: EventBatcher;
  logger: Logger;
  producer: string;
  version(): number;
  taskSet(id: string): Promise<LoadedTaskSet>;
}

export interface Recovered {
  /** Open train groups, by id. */
  groups: GroupState[];
  /** Groups not admitted yet, in submission order. */
  queued: GroupState[];
  /** Members of admitted groups still to run. */
  ready: { group: GroupState; rollout: RolloutRow }[];
  /** The staleness controller's durable state. */
  inFlight: { groupId: string; startVersion: number }[];
  untrained: string[];
}

/**
 * What a previous process of this manager left (its rm_groups / rm_rollouts rows): every rollout
 * that holds a session (running, or about to, with a session opened ahead) has the session
 * closed (its black-box agent died with that process: its sandbox's supervisor has the host's
 * death as its own); one whose session recorded nothing runs
 * again with a new session, any other is reported aborted once (deterministic event ids: a
 * republish is the same event). Eval groups are dropped (their caller is gone); queued work is
 * queued again; the staleness counters are rebuilt.
 */
export async function recoverGroups(d: RecoveryDeps): Promise<Recovered> {
  const out: Recovered = { groups: [], queued: [], ready: [], inFlight: [], untrained: [] };
  const open = await d.state.openGroups();
  const rows = await d.state.rolloutsOfGroups(open.map((g) => g.id));
  for (const row of open) {
    const { spec } = await d.taskSet(row.taskSetId);
    const task = (await d.tasks.tasks(row.taskSetId)).find((t) => t.id === row.taskId);
    if (!task) {
      d.logger.error('recovery: task of an open group is gone', { groupId: row.id, taskId: row.taskId });
      continue;
    }
    const members = rows.filter((r) => r.groupId === row.id);
    for (const m of members.filter((r) => r.status === 'running' || (r.status === 'queued' && r.sessionId))) {
      const calls = m.sessionId ? await closeForRecovery(d, m.sessionId) : 0;
      if (m.status === 'queued' && calls === 0) {
        await d.state.clearSession(m.id);
        m.sessionId = null;
        continue;
      }
      const versionAtStart = m.policyVersionAtStart ?? d.version();
      // It may have started without its rollout.started reaching the bus: both go out (each once, by id).
      await d.events.publishDurably(startedEvent({ producer: d.producer, spec, group: row, rollout: m, versionAtStart }));
      await d.events.publishDurably(
        completedEvent({
          rolloutId: m.id,
          groupId: row.id,
          taskId: row.taskId,
          finishReason: 'aborted',
          outcomeReward: null,
          processRewards: [],
          numCalls: calls ?? 0,
          error: 'rollout manager restarted while the rollout ran',
          versionAtStart,
          success: null,
          producer: d.producer,
          versionAtEnd: d.version(),
        }),
      );
      await d.state.rolloutCompleted(m.id, 'aborted');
      m.status = 'completed';
    }
    const g: GroupState = {
      row,
      task,
      spec,
      members,
      pending: members.filter((m) => m.status !== 'completed').length,
      submittedAt: Date.now(),
    };
    if (row.purpose === 'eval') {
      // An evaluation's caller is gone with the old process: its remaining rollouts are not run.
      for (const m of members.filter((r) => r.status === 'queued')) await d.state.rolloutCompleted(m.id, 'aborted');
      await d.state.setGroup(row.id, 'dropped');
      continue;
    }
    out.groups.push(g);
    if (row.status === 'queued') out.queued.push(g);
    else if (g.pending > 0) {
      out.inFlight.push({ groupId: row.id, startVersion: row.startVersion ?? d.version() });
      for (const m of members.filter((r) => r.status === 'queued')) out.ready.push({ group: g, rollout: m });
    } else {
      if (row.status === 'running') await d.state.setGroup(row.id, 'finished');
      g.row.status = 'finished';
      out.untrained.push(row.id);
    }
  }
  return out;
}

/** Closes a session left behind: how many calls it recorded (0 when the gateway does not know it), null when that cannot be told. */
async function closeForRecovery(d: RecoveryDeps, sessionId: string): Promise<number | null> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return (await d.gateway.closeSession(sessionId)).callCount;
    } catch (err) {
      if (err instanceof GatewayError && err.status === 404) return 0;
      if (attempt === 2) d.logger.error('recovery: session close failed', { sessionId, err });
      else await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
    }
  }
  return null;
}
