// Windowed FIFO (MiniMax-M2 / Forge §6.2.4; TitanRL docs/windowed_fifo.md).
//
// The queue holds generation tasks in submission order (their queue positions). The head is the
// oldest unconsumed entry. The trainer may take any COMPLETED entry among the W queue slots
// [head, head + W - 1]; completed entries beyond that are blocked. Slots are queue entries, not
// positions: an entry that was already taken (or dropped) while older ones wait keeps its slot until
// the head passes it, which is what makes the window advance ONLY as the head is consumed, and
// bounds how far anything can overtake the head:
//   - out-of-order tolerance: an entry bypasses at most W - 1 older unconsumed entries;
//   - off-policy lag in queue positions (entries taken between an entry's submission and its own
//     take): at most N + W - 2 with N entries in flight (N - 1 older ones + W - 1 younger ones);
//   - in steps: S + ceil((W - 1) / P) for staleness bound S and P entries per step
//     (offPolicyBoundSteps; N = (S + 1) P, a consumed entry replaced after its step).
// W = 1 is strict FIFO, W = N greedy ("first finished, first out"), default W = round(0.3 N).
//
// How entries leave: take() (trained), drop(id, reason) (failed, filtered, aborted, expired:
// counted by reason). A dropped entry never blocks the head. A straggler at the head is bounded
// by headAgeLimitMs: expiredHead(now) returns the oldest entry that has not completed — the head,
// or, when the head and the entries after it are completed but cannot fill the batch yet, the first
// unfinished one the window is waiting on — once it is older than that; counted once per entry. The
// caller aborts its rollout and drops it (or completes it with what it has). The scheduler never
// drops by itself: the caller owns the rollout.
import { AdaptiveWindow, adaptiveWindowConfig, type AdaptiveWindowConfig, type AdaptiveWindowState } from './adaptive';
import { requireFinite, requireInt, SchedulingError } from './errors';

export interface FifoEntry {
  id: string;
  /** Queue position (submission order); unique. */
  position: number;
  submittedAt: number;
  /** Task difficulty attribute (any number, larger = harder); used by adaptive W. */
  difficulty?: number;
  groupId?: string;
}

export interface WindowConfig {
  /** N: generation tasks in flight. */
  inFlight: number;
  /** W in [1, N], or 'adaptive'. Default round(0.3 N), at least 1. */
  window?: number | 'adaptive';
  /** Age (ms since submission) after which the oldest entry that has not completed is exposed by expiredHead(). */
  headAgeLimitMs?: number;
  /** Adaptive-W knobs (used when window = 'adaptive'); see adaptive.ts. */
  adaptive?: Partial<AdaptiveWindowConfig>;
}

export interface CompletionInfo {
  tokens: number;
  completedAt: number;
  /** Policy version that generated it (oldest token's), for lag statistics. */
  version?: number;
}

export interface TakeOptions {
  maxItems?: number;
  /** Token budget: entries are added in queue order while the total stays within it (an entry larger than the
   *  whole budget is taken alone, so it cannot block the head). */
  maxTokens?: number;
  now: number;
  /** Take nothing unless at least this many entries are available (default 1). */
  minItems?: number;
  /** Take nothing unless the batch holds at least this many tokens or the token budget is full. */
  minTokens?: number;
}

export interface TakenEntry {
  id: string;
  position: number;
  /** Older entries still unconsumed when this one was taken (<= W - 1). */
  outOfOrder: number;
  /** Entries taken after this one was submitted and before it (<= N + W - 2 with N in flight). */
  lag: number;
  tokens: number;
  version?: number;
  difficulty?: number;
  groupId?: string;
  submittedAt: number;
  completedAt: number;
}

type Status = 'pending' | 'completed' | 'taken' | 'dropped';

interface Slot extends FifoEntry {
  status: Status;
  tokens?: number;
  completedAt?: number;
  version?: number;
  /** Entries taken before this one was submitted. */
  takenAtSubmit: number;
}

export interface WindowedFifoStateEntry {
  id: string;
  position: number;
  submittedAt: number;
  difficulty?: number;
  groupId?: string;
  status: Status;
  tokens?: number;
  completedAt?: number;
  version?: number;
  takenAtSubmit?: number;
}

export interface WindowedFifoCounters {
  submitted: number;
  completed: number;
  taken: number;
  dropped: Record<string, number>;
  headExpired: number;
  maxOutOfOrder: number;
  maxLag: number;
}

export interface WindowedFifoState {
  /** Entries from the head on, in position order; taken/dropped ones younger than the head keep their slot. */
  entries: WindowedFifoStateEntry[];
  /** Highest position the head has passed (positions <= it cannot be submitted again); null if none. */
  passedPosition: number | null;
  counters?: WindowedFifoCounters;
  window?: number;
  adaptive?: AdaptiveWindowState;
  expiredIds?: string[];
}

export interface WindowedFifoStats extends WindowedFifoCounters {
  window: number;
  /** Entries submitted and not completed. */
  pending: number;
  /** Completed entries not yet taken. */
  ready: number;
  /** Completed entries outside the window (blocked). */
  blocked: number;
}

/** Worst-case age in train steps of a consumed entry: S + ceil((W - 1) / P). */
export function offPolicyBoundSteps(S: number, W: number, P: number): number {
  requireInt('S', S, 0);
  requireInt('W', W, 1);
  requireInt('P', P, 1);
  return S + Math.ceil((W - 1) / P);
}

/** Worst-case off-policy lag in queue positions with N in flight and window W: N + W - 2. */
export function offPolicyBoundPositions(N: number, W: number): number {
  requireInt('N', N, 1);
  requireInt('W', W, 1, N);
  return N + W - 2;
}

/** The default window for N in flight: round(0.3 N), at least 1. */
export function defaultWindow(N: number): number {
  requireInt('inFlight', N, 1);
  return Math.max(1, Math.round(0.3 * N));
}

function validateConfig(cfg: WindowConfig): {
  N: number;
  fixed: number | null;
  adaptive: AdaptiveWindowConfig | null;
  headAgeLimitMs: number | null;
} {
  if (!cfg || typeof cfg !== 'object') throw new SchedulingError('invalid_config', 'config', 'must be an object');
  const N = requireInt('inFlight', cfg.inFlight, 1, Number.MAX_SAFE_INTEGER, 'invalid_config');
  let fixed: number | null = null;
  let adaptive: AdaptiveWindowConfig | null = null;
  if (cfg.window === 'adaptive') adaptive = adaptiveWindowConfig(N, cfg.adaptive);
  else if (cfg.window === undefined) fixed = defaultWindow(N);
  else {
    if (typeof cfg.window !== 'number' || !Number.isInteger(cfg.window))
      throw new SchedulingError('invalid_config', 'window', `must be an integer in [1, ${N}] or 'adaptive', got ${String(cfg.window)}`);
    if (cfg.window < 1) throw new SchedulingError('invalid_config', 'window', `W must be >= 1, got ${cfg.window}`);
    if (cfg.window > N) throw new SchedulingError('invalid_config', 'window', `W must be <= N = inFlight (${N}), got ${cfg.window}`);
    fixed = cfg.window;
  }
  if (cfg.adaptive !== undefined && cfg.window !== 'adaptive')
    throw new SchedulingError('invalid_config', 'adaptive', "adaptive knobs given but window is not 'adaptive'");
  let headAgeLimitMs: number | null = null;
  if (cfg.headAgeLimitMs !== undefined) {
    headAgeLimitMs = requireFinite('headAgeLimitMs', cfg.headAgeLimitMs, 0, 'invalid_config');
    if (headAgeLimitMs <= 0) throw new SchedulingError('invalid_config', 'headAgeLimitMs', `must be > 0, got ${headAgeLimitMs}`);
  }
  return { N, fixed, adaptive, headAgeLimitMs };
}

export class WindowedFifo {
  private readonly N: number;
  private readonly fixed: number | null;
  private ctrl: AdaptiveWindow | null;
  private readonly headAgeLimitMs: number | null;
  /** Slots in position order; q[h] is the head (first unconsumed) or h === q.length. */
  private q: Slot[] = [];
  private h = 0;
  private readonly byId = new Map<string, Slot>();
  private passed: number | null = null;
  private readonly expired = new Set<string>();
  private c: WindowedFifoCounters = { submitted: 0, completed: 0, taken: 0, dropped: {}, headExpired: 0, maxOutOfOrder: 0, maxLag: 0 };
  private pendingCount = 0;
  private readyCount = 0;
  private lastW: number | null = null;

  constructor(cfg: WindowConfig) {
    const v = validateConfig(cfg);
    this.N = v.N;
    this.fixed = v.fixed;
    this.ctrl = v.adaptive ? new AdaptiveWindow(v.adaptive) : null;
    this.headAgeLimitMs = v.headAgeLimitMs;
  }

  /** The current W. */
  get window(): number {
    return this.ctrl ? this.ctrl.window : (this.fixed as number);
  }

  /** The W the last non-empty take used (adaptive: wider than the base when the mix gate or patience widened it); null before the first. */
  get lastTakeWindow(): number | null {
    return this.lastW;
  }

  /** Queue position of the head (oldest unconsumed entry), or null when the queue is empty. */
  get head(): number | null {
    return this.h < this.q.length ? this.q[this.h].position : null;
  }

  get inFlight(): number {
    return this.N;
  }

  /** Adaptive drift (population standard deviations), or null for a fixed window. */
  get drift(): number | null {
    return this.ctrl ? this.ctrl.drift : null;
  }

  submit(e: FifoEntry): void {
    if (!e || typeof e !== 'object') throw new SchedulingError('invalid_argument', 'entry', 'must be an object');
    if (typeof e.id !== 'string' || e.id.length === 0) throw new SchedulingError('invalid_argument', 'id', 'must be a non-empty string');
    requireInt('position', e.position, Number.MIN_SAFE_INTEGER);
    requireFinite('submittedAt', e.submittedAt);
    if (e.difficulty !== undefined) requireFinite('difficulty', e.difficulty);
    if (e.groupId !== undefined && typeof e.groupId !== 'string')
      throw new SchedulingError('invalid_argument', 'groupId', 'must be a string');
    if (this.byId.has(e.id)) throw new SchedulingError('duplicate_id', 'id', `entry ${e.id} is already in the queue`);
    if (this.passed !== null && e.position <= this.passed)
      throw new SchedulingError(
        'stale_position',
        'position',
        `position ${e.position} is at or before positions the head already passed (${this.passed})`,
      );
    const slot: Slot = { id: e.id, position: e.position, submittedAt: e.submittedAt, status: 'pending', takenAtSubmit: this.c.taken };
    if (e.difficulty !== undefined) slot.difficulty = e.difficulty;
    if (e.groupId !== undefined) slot.groupId = e.groupId;
    const last = this.q.length > 0 ? this.q[this.q.length - 1].position : null;
    if (last === null || e.position > last) this.q.push(slot);
    else {
      // late arrival (submission events can be reordered): insert by position
      let lo = this.h,
        hi = this.q.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (this.q[mid].position < e.position) lo = mid + 1;
        else hi = mid;
      }
      if (lo < this.q.length && this.q[lo].position === e.position)
        throw new SchedulingError('duplicate_position', 'position', `position ${e.position} is already held by entry ${this.q[lo].id}`);
      this.q.splice(lo, 0, slot);
    }
    this.byId.set(e.id, slot);
    this.c.submitted++;
    this.pendingCount++;
    if (this.ctrl && e.difficulty !== undefined) this.ctrl.observe(e.difficulty);
  }

  complete(id: string, info: CompletionInfo): void {
    const s = this.slot(id);
    if (s.status !== 'pending') throw new SchedulingError('invalid_transition', 'id', `entry ${id} is ${s.status}, not pending`);
    if (!info || typeof info !== 'object') throw new SchedulingError('invalid_argument', 'info', 'must be an object');
    requireInt('tokens', info.tokens, 0);
    requireFinite('completedAt', info.completedAt);
    if (info.version !== undefined) requireInt('version', info.version, 0);
    s.status = 'completed';
    s.tokens = info.tokens;
    s.completedAt = info.completedAt;
    if (info.version !== undefined) s.version = info.version;
    this.c.completed++;
    this.pendingCount--;
    this.readyCount++;
    if (this.ctrl && s.difficulty === undefined) this.ctrl.observe(Math.log1p(Math.max(0, info.completedAt - s.submittedAt)));
  }

  /** The entry leaves the queue (failed, filtered, aborted, expired), counted under `reason`. */
  drop(id: string, reason: string): void {
    const s = this.slot(id);
    if (typeof reason !== 'string' || reason.length === 0)
      throw new SchedulingError('invalid_argument', 'reason', 'must be a non-empty string');
    if (s.status === 'taken' || s.status === 'dropped')
      throw new SchedulingError('invalid_transition', 'id', `entry ${id} is already ${s.status}`);
    if (s.status === 'pending') this.pendingCount--;
    else this.readyCount--;
    s.status = 'dropped';
    this.c.dropped[reason] = (this.c.dropped[reason] ?? 0) + 1;
    this.advanceHead();
  }

  /**
   * The oldest entry that has not completed (the head, or the first unfinished entry after completed ones: the one
   * the window waits on), if it is older than headAgeLimitMs; the caller aborts or drops it. Null when no limit is
   * configured, nothing is unfinished, or the oldest unfinished entry is young enough.
   */
  expiredHead(now: number): FifoEntry | null {
    requireFinite('now', now);
    if (this.headAgeLimitMs === null) return null;
    let i = this.h;
    while (i < this.q.length && this.q[i].status !== 'pending') i++;
    if (i >= this.q.length) return null;
    const s = this.q[i];
    if (now - s.submittedAt <= this.headAgeLimitMs) return null;
    if (!this.expired.has(s.id)) {
      this.expired.add(s.id);
      this.c.headExpired++;
    }
    return publicEntry(s);
  }

  /** Adaptive-W input: the trainer waited `ms` for a batch. */
  trainerWaited(ms: number): void {
    requireFinite('ms', ms, 0);
    if (this.ctrl) this.ctrl.waited(ms);
  }

  take(opts: TakeOptions): TakenEntry[] {
    if (!opts || typeof opts !== 'object') throw new SchedulingError('invalid_argument', 'opts', 'must be an object');
    const now = requireFinite('now', opts.now);
    const maxItems = opts.maxItems === undefined ? Infinity : requireInt('maxItems', opts.maxItems, 1);
    const maxTokens = opts.maxTokens === undefined ? Infinity : requireInt('maxTokens', opts.maxTokens, 1);
    const minItems = opts.minItems === undefined ? 1 : requireInt('minItems', opts.minItems, 0);
    const minTokens = opts.minTokens === undefined ? 0 : requireInt('minTokens', opts.minTokens, 0);
    if (minItems > maxItems)
      throw new SchedulingError('invalid_argument', 'minItems', `must be <= maxItems (${maxItems}), got ${minItems}`);
    if (minTokens > maxTokens)
      throw new SchedulingError('invalid_argument', 'minTokens', `must be <= maxTokens (${maxTokens}), got ${minTokens}`);

    // 1. select without mutating (minItems/minTokens may refuse the batch)
    const limits = { maxItems, maxTokens, minItems, minTokens };
    let sel = this.select(this.window, limits);
    let used = this.window;
    if (!sel.valid && this.ctrl) {
      // Adaptive: the current window cannot fill a batch. The controller may widen at once to the narrowest window
      // that can (see the mix gate in adaptive.ts): only if that batch's difficulty mix is representative.
      const wide = this.select(this.ctrl.cfg.max, limits);
      if (wide.valid && this.ctrl.admitsWider(wide.picked.map((i) => this.difficultyOf(this.q[i])))) {
        this.ctrl.widenTo(wide.need);
        sel = wide;
        used = this.ctrl.window;
      }
    }
    if (!sel.valid) return [];
    const picked = sel.picked;

    // 2. commit, in queue order
    const out: TakenEntry[] = [];
    let p = 0;
    let olderUnconsumed = 0;
    for (let i = this.h; p < picked.length; i++) {
      const s = this.q[i];
      if (i === picked[p]) {
        s.status = 'taken';
        const lag = this.c.taken - s.takenAtSubmit;
        const e: TakenEntry = {
          id: s.id,
          position: s.position,
          outOfOrder: olderUnconsumed,
          lag,
          tokens: s.tokens as number,
          submittedAt: s.submittedAt,
          completedAt: s.completedAt as number,
        };
        if (s.version !== undefined) e.version = s.version;
        if (s.difficulty !== undefined) e.difficulty = s.difficulty;
        if (s.groupId !== undefined) e.groupId = s.groupId;
        out.push(e);
        this.c.taken++;
        this.readyCount--;
        if (olderUnconsumed > this.c.maxOutOfOrder) this.c.maxOutOfOrder = olderUnconsumed;
        if (lag > this.c.maxLag) this.c.maxLag = lag;
        p++;
      } else if (s.status === 'pending' || s.status === 'completed') olderUnconsumed++;
    }
    this.advanceHead();
    this.lastW = used;
    if (this.ctrl) {
      this.ctrl.step(
        now,
        out.map((e) => e.difficulty ?? Math.log1p(Math.max(0, e.completedAt - e.submittedAt))),
      );
    }
    return out;
  }

  stats(): WindowedFifoStats {
    const W = this.window;
    let blocked = 0;
    for (let i = this.h + W; i < this.q.length; i++) if (this.q[i].status === 'completed') blocked++;
    return { ...this.c, dropped: { ...this.c.dropped }, window: W, pending: this.pendingCount, ready: this.readyCount, blocked };
  }

  snapshot(): WindowedFifoState {
    const entries: WindowedFifoStateEntry[] = [];
    for (let i = this.h; i < this.q.length; i++) {
      const s = this.q[i];
      const e: WindowedFifoStateEntry = {
        id: s.id,
        position: s.position,
        submittedAt: s.submittedAt,
        status: s.status,
        takenAtSubmit: s.takenAtSubmit,
      };
      if (s.difficulty !== undefined) e.difficulty = s.difficulty;
      if (s.groupId !== undefined) e.groupId = s.groupId;
      if (s.tokens !== undefined) e.tokens = s.tokens;
      if (s.completedAt !== undefined) e.completedAt = s.completedAt;
      if (s.version !== undefined) e.version = s.version;
      entries.push(e);
    }
    const state: WindowedFifoState = {
      entries,
      passedPosition: this.passed,
      counters: { ...this.c, dropped: { ...this.c.dropped } },
      window: this.window,
      expiredIds: [...this.expired].filter((id) => this.byId.has(id)),
    };
    if (this.ctrl) state.adaptive = this.ctrl.snapshot();
    return state;
  }

  /**
   * Rebuild from durable state (a snapshot, or rows the caller reads back: every unconsumed entry plus the taken or
   * dropped ones younger than the head, which keep their window slot).
   */
  static restore(cfg: WindowConfig, s: WindowedFifoState): WindowedFifo {
    const f = new WindowedFifo(cfg);
    if (!s || typeof s !== 'object') throw new SchedulingError('invalid_state', 'state', 'must be an object');
    if (!Array.isArray(s.entries)) throw new SchedulingError('invalid_state', 'entries', 'must be an array');
    if (s.passedPosition !== null && s.passedPosition !== undefined)
      requireInt('passedPosition', s.passedPosition, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, 'invalid_state');
    f.passed = s.passedPosition ?? null;
    if (s.counters !== undefined) {
      const c = s.counters;
      for (const k of ['submitted', 'completed', 'taken', 'headExpired', 'maxOutOfOrder', 'maxLag'] as const)
        requireInt(`counters.${k}`, c[k], 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
      if (!c.dropped || typeof c.dropped !== 'object') throw new SchedulingError('invalid_state', 'counters.dropped', 'must be an object');
      for (const [k, v] of Object.entries(c.dropped)) requireInt(`counters.dropped.${k}`, v, 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
      f.c = { ...c, dropped: { ...c.dropped } };
    }
    let prev: number | null = null;
    s.entries.forEach((e, i) => {
      const at = `entries[${i}]`;
      if (!e || typeof e !== 'object') throw new SchedulingError('invalid_state', at, 'must be an object');
      if (typeof e.id !== 'string' || e.id.length === 0)
        throw new SchedulingError('invalid_state', `${at}.id`, 'must be a non-empty string');
      requireInt(`${at}.position`, e.position, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, 'invalid_state');
      requireFinite(`${at}.submittedAt`, e.submittedAt, -Infinity, 'invalid_state');
      if (f.byId.has(e.id)) throw new SchedulingError('duplicate_id', `${at}.id`, `entry ${e.id} appears twice`);
      if (prev !== null && e.position === prev)
        throw new SchedulingError('duplicate_position', `${at}.position`, `position ${e.position} appears twice`);
      if (prev !== null && e.position < prev)
        throw new SchedulingError('invalid_state', `${at}.position`, `entries must be in position order (${e.position} after ${prev})`);
      if (f.passed !== null && e.position <= f.passed)
        throw new SchedulingError('stale_position', `${at}.position`, `position ${e.position} is at or before passedPosition ${f.passed}`);
      if (!['pending', 'completed', 'taken', 'dropped'].includes(e.status))
        throw new SchedulingError('invalid_state', `${at}.status`, `must be pending, completed, taken or dropped, got ${String(e.status)}`);
      if (e.difficulty !== undefined) requireFinite(`${at}.difficulty`, e.difficulty, -Infinity, 'invalid_state');
      if (e.status === 'completed' || e.status === 'taken') {
        requireInt(`${at}.tokens`, e.tokens, 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
        requireFinite(`${at}.completedAt`, e.completedAt, -Infinity, 'invalid_state');
      }
      if (e.version !== undefined) requireInt(`${at}.version`, e.version, 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
      const takenAtSubmit = e.takenAtSubmit ?? f.c.taken;
      requireInt(`${at}.takenAtSubmit`, takenAtSubmit, 0, f.c.taken, 'invalid_state');
      prev = e.position;
      const slot: Slot = { id: e.id, position: e.position, submittedAt: e.submittedAt, status: e.status, takenAtSubmit };
      for (const k of ['difficulty', 'groupId', 'tokens', 'completedAt', 'version'] as const)
        if (e[k] !== undefined) (slot as unknown as Record<string, unknown>)[k] = e[k];
      f.q.push(slot);
      f.byId.set(e.id, slot);
      if (e.status === 'pending') f.pendingCount++;
      else if (e.status === 'completed') f.readyCount++;
    });
    if (s.counters === undefined) {
      f.c.submitted = s.entries.length;
      f.c.completed = s.entries.filter((e) => e.status !== 'pending' && e.status !== 'dropped').length;
    }
    if (f.ctrl && s.adaptive !== undefined) {
      f.ctrl = new AdaptiveWindow(f.ctrl.cfg, s.adaptive);
    } else if (s.adaptive !== undefined)
      throw new SchedulingError('invalid_state', 'adaptive', "adaptive state given but window is not 'adaptive'");
    if (s.window !== undefined && !f.ctrl && s.window !== f.window)
      throw new SchedulingError('invalid_state', 'window', `snapshot was taken with W = ${s.window}, config says ${f.window}`);
    for (const id of s.expiredIds ?? []) if (f.byId.has(id)) f.expired.add(id);
    f.advanceHead();
    return f;
  }

  /**
   * The batch window W would give now: completed entries in queue order among the W slots from the head (the head
   * moving on as it is picked), within the item and token limits. `need` is the narrowest window that gives the same
   * batch (the widest head offset the scan had to look at up to its last pick).
   */
  private select(
    W: number,
    l: { maxItems: number; maxTokens: number; minItems: number; minTokens: number },
  ): { picked: number[]; valid: boolean; need: number } {
    const picked: number[] = [];
    const isPicked = new Set<number>();
    let tokens = 0;
    let budgetFull = false;
    let head = this.h;
    let idx = head;
    let need = 1;
    let reach = 1;
    while (idx < this.q.length && idx < head + W && picked.length < l.maxItems) {
      reach = Math.max(reach, idx - head + 1);
      const s = this.q[idx];
      if (s.status === 'completed') {
        const t = s.tokens as number;
        if (tokens + t > l.maxTokens && picked.length > 0) {
          // the scan had to reach this entry to know the budget is full
          budgetFull = true;
          need = reach;
          break;
        }
        picked.push(idx);
        isPicked.add(idx);
        need = reach;
        tokens += t;
        if (idx === head) {
          head++;
          while (head < this.q.length && (isPicked.has(head) || this.q[head].status === 'taken' || this.q[head].status === 'dropped'))
            head++;
        }
        if (tokens >= l.maxTokens) {
          budgetFull = true;
          break;
        }
      }
      idx++;
    }
    const valid = picked.length > 0 && picked.length >= l.minItems && (tokens >= l.minTokens || budgetFull);
    return { picked, valid, need };
  }

  /** Adaptive-W difficulty of a completed entry: its attribute, or its measured completion time log(1 + ms). */
  private difficultyOf(s: Slot): number {
    return s.difficulty ?? Math.log1p(Math.max(0, (s.completedAt as number) - s.submittedAt));
  }

  private slot(id: string): Slot {
    if (typeof id !== 'string') throw new SchedulingError('invalid_argument', 'id', 'must be a string');
    const s = this.byId.get(id);
    if (!s) throw new SchedulingError('unknown_id', 'id', `no entry ${id} in the queue (never submitted, or already passed by the head)`);
    return s;
  }

  /** Move the head past consumed slots; forget them (their ids become unknown). */
  private advanceHead(): void {
    while (this.h < this.q.length && (this.q[this.h].status === 'taken' || this.q[this.h].status === 'dropped')) {
      const s = this.q[this.h];
      this.byId.delete(s.id);
      this.expired.delete(s.id);
      this.passed = s.position;
      this.h++;
    }
    if (this.h > 1024 && this.h * 2 > this.q.length) {
      this.q = this.q.slice(this.h);
      this.h = 0;
    }
  }
}

function publicEntry(s: Slot): FifoEntry {
  const e: FifoEntry = { id: s.id, position: s.position, submittedAt: s.submittedAt };
  if (s.difficulty !== undefined) e.difficulty = s.difficulty;
  if (s.groupId !== undefined) e.groupId = s.groupId;
  return e;
}
