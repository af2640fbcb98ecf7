import { GrammarError } from './errors';
import { JsonSchemaCompiler, type JsonSchema } from './nfa/json-schema';
import { NfaBuilder, type Nfa } from './nfa/nfa';

/**
 * What a constrained generation must write (then one of its stop ids): literal text, a JSON
 * value valid against a JSON Schema, a sequence, or one of several alternatives. Plain JSON, so
 * it travels in generate requests (libs/contracts `generateConstraintSchema` is its wire schema)
 * and every backend compiles the same thing: the embedded engine into token masks
 * (TokenAutomaton), vLLM and SGLang into their EBNF grammars (toEbnf).
 */
export type GrammarNode = { text: string } | { json: JsonSchema } | { seq: GrammarNode[] } | { oneOf: GrammarNode[] };

export interface CompileOptions {
  /**
   * Added tokens of the vocabulary the automaton will run over: literal text containing one is
   * matched as that token only (as the tokenizer encodes it), never spelled out of bytes. Null:
   * literal text is characters (for engines that match text, such as an EBNF export).
   */
  addedTokens?: readonly string[] | null;
  /** Caps the automaton's size (states). */
  maxStates?: number;
}

/** The automaton of a grammar. Throws GrammarError for what it cannot enforce, and when no output satisfies it. */
export function compileGrammar(node: GrammarNode, options: CompileOptions = {}): Nfa {
  const b = new NfaBuilder(options.addedTokens ?? null, options.maxStates);
  const start = b.state();
  const end = emit(b, start, node, '#');
  const nfa = b.build(start, end);
  if (!Number.isFinite(nfa.dist[start])) throw new GrammarError('invalid', '#', 'no output satisfies this grammar');
  return nfa;
}

function emit(b: NfaBuilder, from: number, node: GrammarNode, path: string): number {
  if (node === null || typeof node !== 'object') throw new GrammarError('invalid', path, 'a grammar node must be an object');
  if ('text' in node) {
    if (typeof node.text !== 'string') throw new GrammarError('invalid', path, '`text` must be a string');
    return b.text(from, node.text);
  }
  if ('json' in node) {
    try {
      return new JsonSchemaCompiler(b, node.json).value(from, node.json);
    } catch (err) {
      if (err instanceof GrammarError)
        throw new GrammarError(err.kind, `${path}/json${err.path.slice(1)}`, err.message.slice(err.path.length + 2));
      throw err;
    }
  }
  if ('seq' in node && Array.isArray(node.seq)) {
    let at = from;
    node.seq.forEach((n, i) => (at = emit(b, at, n, `${path}/seq/${i}`)));
    return at;
  }
  if ('oneOf' in node && Array.isArray(node.oneOf)) {
    if (node.oneOf.length === 0) throw new GrammarError('invalid', path, '`oneOf` needs at least one alternative');
    return b.alt(
      from,
      node.oneOf.map((n, i) => (s: number) => emit(b, s, n, `${path}/oneOf/${i}`)),
    );
  }
  throw new GrammarError('invalid', path, 'a grammar node is {text}, {json}, {seq: [...]} or {oneOf: [...]}');
}
