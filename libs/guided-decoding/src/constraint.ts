import { DEAD } from './automaton/byte-dfa';
import { FINISHED, type TokenAutomaton } from './automaton/token-automaton';

/** A token the grammar does not allow was handed to advance(). */
export class ConstraintViolationError extends Error {
  override readonly name = 'ConstraintViolationError';
}

/**
 * One generation's walk through a compiled grammar: the engine asks `allowed(remaining)` before
 * sampling each token (a bitmask over the vocabulary) and reports the sampled id with
 * `advance(id)`. `lastAllowedCount` says how many ids the last mask allowed: 1 means the token
 * was forced (no choice was made), which the capture records.
 */
export class GrammarConstraint {
  private state: number;
  lastAllowedCount = 0;

  /** `prefixIds`: tokens already generated under this grammar (a resumed generation replays them). */
  constructor(
    private readonly automaton: TokenAutomaton,
    prefixIds: readonly number[] = [],
  ) {
    this.state = automaton.start;
    for (const id of prefixIds) this.advance(id);
  }

  /** Mask of the ids that may be sampled next (shared: do not modify). */
  allowed(remaining?: number): Uint32Array {
    const a = this.automaton.allowed(this.state, remaining);
    this.lastAllowedCount = a.count;
    return a.mask;
  }

  advance(id: number): void {
    const next = this.automaton.next(this.state, id);
    if (next === DEAD) throw new ConstraintViolationError(`token ${id} is not allowed by the grammar here`);
    this.state = next;
  }

  /** The grammar is complete (a stop id may end it now). */
  get accepting(): boolean {
    return this.automaton.accepting(this.state);
  }

  /** A stop id was sampled at the end of the grammar. */
  get finished(): boolean {
    return this.state === FINISHED;
  }
}
