/**
 * `anvil stack up|down|status`: the distributed run, each service its own process over a real
 * Kafka broker and PostgreSQL server (started and installed by the project's tools/infra on first
 * use, or yours with --brokers/--database).
 */
import { checkRunConfig } from '../../config/run-files';
import { runConfigInput } from '../../config/run-config';
import { down } from '../../stack/down';
import { status } from '../../stack/status';
import { up } from '../../stack/up';
import { parseOptions, type Command } from '../command';
import { configOrExit } from './config-args';

/** The data directory a stack command looks in: the config's dataDir, ANVIL_DATA_DIR, or .anvil. */
function dataDirOf(file: string | undefined): string {
  const raw = runConfigInput({ file, env: process.env });
  return typeof raw.dataDir === 'string' && raw.dataDir !== '' ? raw.dataDir : '.anvil';
}

const upCommand: Command = {
  name: 'up',
  summary: 'run training with each service its own process, over Kafka and PostgreSQL (in the foreground)',
  usage: 'anvil stack up [--config run.json] [--keep-services] [--no-build] [--brokers HOST:PORT --database postgres://...]',
  help: `The same run as \`anvil train\` (the same run configuration, starting weights, task set,
evaluations, progress line, report and JSON summary), driven by the same driver, with the five
services as processes of their own. It starts Kafka (127.0.0.1:19092) and PostgreSQL
(127.0.0.1:15432) unless --brokers/--database name yours, rebuilds dist/ when a source is newer,
gives the run its own database and topic prefix, starts the services (logs in
<dataDir>/runs/<run>/logs/), runs, writes the report and stops the services in order.

options:
  --config FILE      the run configuration (docs/configuration.md)
  --keep-services    leave the services up after the run (\`anvil stack down\` stops them)
  --no-build         do not rebuild dist/
  --brokers LIST     Kafka bootstrap servers you run (with --database)
  --database URL     a PostgreSQL server URL you run (with --brokers)

Ctrl-C, or \`anvil stack down\` from another terminal, stops the run and the services gracefully.`,
  async run(args) {
    const { values } = parseOptions('stack up', args, {
      config: { type: 'string' },
      'keep-services': { type: 'boolean', default: false },
      'no-build': { type: 'boolean', default: false },
      brokers: { type: 'string' },
      database: { type: 'string' },
    });
    const cfg = configOrExit(checkRunConfig({ file: values.config, env: process.env }));
    if (typeof cfg === 'number') return cfg;
    return up({
      cfg,
      brokers: values.brokers,
      database: values.database,
      keepServices: values['keep-services'],
      build: !values['no-build'],
    });
  },
};

const downCommand: Command = {
  name: 'down',
  summary: 'stop the running stack run and its services, then Kafka and PostgreSQL',
  usage: 'anvil stack down [--config run.json] [--keep-infra]',
  help: `Stops a run still being driven through its driver (the same graceful path as Ctrl-C), services
left running (--keep-services, or a driver that died), then Kafka and PostgreSQL when the stack
started them (not --brokers/--database ones).

options:
  --config FILE   the run configuration whose dataDir holds the stack's state (default .anvil)
  --keep-infra    leave Kafka and PostgreSQL running`,
  async run(args) {
    const { values } = parseOptions('stack down', args, { config: { type: 'string' }, 'keep-infra': { type: 'boolean', default: false } });
    return down({ dataDir: dataDirOf(values.config), keepInfra: values['keep-infra'] });
  },
};

const statusCommand: Command = {
  name: 'status',
  summary: "Kafka, PostgreSQL, the run, each service's pid, address and readiness",
  usage: 'anvil stack status [--config run.json]',
  help: `Exit 0 when the infrastructure and the run's services are up, 3 otherwise.

options:
  --config FILE   the run configuration whose dataDir holds the stack's state (default .anvil)`,
  async run(args) {
    const { values } = parseOptions('stack status', args, { config: { type: 'string' } });
    return status({ dataDir: dataDirOf(values.config) });
  },
};

export const stackCommand: Command = {
  name: 'stack',
  summary: 'the distributed run: up | down | status',
  usage: 'anvil stack <up|down|status> [options]',
  help: '',
  subcommands: [upCommand, downCommand, statusCommand],
};
