import { TokenAutomaton } from './automaton/token-automaton';
import { Vocabulary, type TokenSource } from './automaton/vocabulary';
import { GrammarConstraint } from './constraint';
import { compileGrammar, type GrammarNode } from './grammar';

/**
 * Compiles grammars over one vocabulary and keeps the most recent automata (LRU): the calls of a
 * rollout group share their tools, so they share one automaton and the masks it has cached.
 */
export class ConstraintCompiler {
  readonly vocab: Vocabulary;
  private readonly cache = new Map<string, TokenAutomaton>();

  /** `size`: the model's vocabulary (masks cover it; ids beyond the tokenizer's are never allowed). */
  constructor(
    source: TokenSource | Vocabulary,
    size?: number,
    private readonly capacity = 64,
  ) {
    this.vocab = source instanceof Vocabulary ? source : new Vocabulary(source, size);
  }

  /** The automaton of `grammar` ended by `stopIds` (GrammarError when it cannot be compiled). */
  automaton(grammar: GrammarNode, stopIds: readonly number[]): TokenAutomaton {
    const key = `${JSON.stringify(grammar)}\u0000${stopIds.join(',')}`;
    let a = this.cache.get(key);
    if (a) {
      this.cache.delete(key);
      this.cache.set(key, a);
      return a;
    }
    a = new TokenAutomaton(compileGrammar(grammar, { addedTokens: this.vocab.addedContents() }), this.vocab, stopIds);
    this.cache.set(key, a);
    if (this.cache.size > this.capacity) this.cache.delete(this.cache.keys().next().value as string);
    return a;
  }

  /** A fresh walk through `grammar`, past `prefixIds` already generated under it. */
  constraint(grammar: GrammarNode, stopIds: readonly number[], prefixIds: readonly number[] = []): GrammarConstraint {
    return new GrammarConstraint(this.automaton(grammar, stopIds), prefixIds);
  }
}
