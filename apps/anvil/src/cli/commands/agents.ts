/**
 * `anvil agents list|install`: the harness presets a task set may name instead of a command
 * (`"agent": {"kind": "black-box", "preset": "codex"}`), each a third-party coding agent pinned
 * to one version of its registry package and installed into the agents directory, which local
 * sandboxes read.
 */
import {
  PRESETS,
  PRESET_NAMES,
  PresetInstallError,
  defaultAgentsDir,
  installPlace,
  installPreset,
  installState,
  isPresetName,
  type PresetName,
} from '@anvil/rollout-manager';
import { EXIT, parseOptions, UsageError, type Command } from '../command';

const DIR_HELP = `  --dir D   the agents directory (default: $ANVIL_AGENTS_DIR, else .cache/agents of the Anvil checkout)`;
const agentsDir = (dir: string | undefined) => dir ?? defaultAgentsDir();
const registryName = (name: PresetName) => (PRESETS[name].install.registry === 'npm' ? 'npm' : 'PyPI');

const listCommand: Command = {
  name: 'list',
  summary: 'every harness preset, its pinned version, and whether it is installed (where)',
  usage: 'anvil agents list [--dir D] [--json]',
  help: `Prints one line per preset: its name, the registry package and version it is pinned to, and
where its executable is, or "not installed" (with the version found there, if another one).

options:
${DIR_HELP}
  --json    one JSON object per preset instead: {name, package, registry, version, installed, found, bin}`,
  async run(args) {
    const { values } = parseOptions('agents list', args, { dir: { type: 'string' }, json: { type: 'boolean', default: false } });
    const dir = agentsDir(values.dir);
    const width = Math.max(...PRESET_NAMES.map((n) => n.length));
    for (const name of PRESET_NAMES) {
      const p = PRESETS[name];
      const s = installState(p, dir);
      if (values.json) {
        const row = { name, package: p.install.package, registry: p.install.registry, version: p.install.version, installed: s.installed };
        console.log(JSON.stringify({ ...row, found: s.version, bin: s.bin }));
        continue;
      }
      const where = s.installed ? s.bin : s.version ? `not installed (${s.version} found, ${p.install.version} pinned)` : 'not installed';
      console.log(
        `${name.padEnd(width)}  ${p.summary} [${registryName(name)} ${p.install.package}==${p.install.version}]\n${' '.repeat(width)}  ${where}`,
      );
    }
    return EXIT.ok;
  },
};

const installCommand: Command = {
  name: 'install',
  summary: 'install harness presets from their registries at their pinned versions',
  usage: 'anvil agents install NAME... | --all [--dir D]',
  help: `Installs each named preset (${PRESET_NAMES.join(', ')}) unless it is there at its
pinned version: npm packages into D/node_modules (the agents' own package.json), PyPI packages into a
venv of their own, D/python/NAME, built on /usr/bin/python3 (a Python that local sandboxes see).
Every file is left readable by all users, so a sandbox's uid can run the agent. Needs the npm and PyPI
registries; prints where each executable is. A preset that fails stops the command (exit 1).

options:
  --all     every preset
${DIR_HELP}`,
  async run(args) {
    const { values, positionals } = parseOptions(
      'agents install',
      args,
      { dir: { type: 'string' }, all: { type: 'boolean', default: false } },
      true,
    );
    if (values.all === positionals.length > 0)
      throw new UsageError('anvil agents install: name presets or give --all (see anvil agents list)');
    const unknown = positionals.filter((n) => !isPresetName(n));
    if (unknown.length) throw new UsageError(`anvil agents install: no preset ${unknown.join(', ')} (known: ${PRESET_NAMES.join(', ')})`);
    const names = values.all ? [...PRESET_NAMES] : (positionals as PresetName[]);
    const dir = agentsDir(values.dir);
    for (const name of names) {
      const p = PRESETS[name];
      if (!installState(p, dir).installed)
        console.log(
          `${name}: installing ${p.install.package}==${p.install.version} from ${registryName(name)} into ${installPlace(p, dir)} ...`,
        );
      try {
        const s = await installPreset(p, { agentsDir: dir, all: Object.values(PRESETS) });
        console.log(`${name}: ${s.bin}${s.changed ? '' : ' (already installed)'}`);
      } catch (e) {
        if (!(e instanceof PresetInstallError)) throw e;
        console.error(`anvil agents install: ${e.message}`);
        return EXIT.failed;
      }
    }
    return EXIT.ok;
  },
};

export const agentsCommand: Command = {
  name: 'agents',
  summary: 'harness presets (Codex CLI, Claude Code, mini-swe-agent, ...): list them, install them',
  usage: 'anvil agents <list|install> ...',
  help: `A black-box agent may be a preset instead of a command: {"kind": "black-box", "preset": NAME}.
A run whose preset is not installed is refused before it starts, naming \`anvil agents install NAME\`.`,
  subcommands: [listCommand, installCommand],
};
