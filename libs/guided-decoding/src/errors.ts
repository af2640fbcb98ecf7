/**
 * Why a grammar cannot be compiled: a JSON Schema keyword the automaton cannot honour
 * (`unsupported`), a schema that is not valid (`invalid`), or one whose automaton would be too
 * large (`too-large`). `path` is a JSON pointer into the grammar's schema (`#/properties/a`).
 * Callers answer it as a client error: a guarantee that cannot be given is refused, never
 * silently weakened.
 */
export class GrammarError extends Error {
  override readonly name = 'GrammarError';
  constructor(
    readonly kind: 'unsupported' | 'invalid' | 'too-large',
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}
