import { SandboxUnavailableError } from './errors';
import { LocalSandbox, type LocalBackendOptions } from './local/local-backend';
import { NoneSandbox } from './none/none-backend';
import type { SandboxBackend } from './types';

export type SandboxKind = 'local' | 'none';
export const SANDBOX_KINDS: readonly SandboxKind[] = ['local', 'none'];

/**
 * A ready backend of the given kind: tools installed, the kernel's support proven. Throws
 * SandboxUnavailableError (with what to do) when it cannot work here; there is no fallback from
 * one kind to another, least of all to 'none'.
 */
export async function createSandbox(kind: SandboxKind, opts: LocalBackendOptions = {}): Promise<SandboxBackend> {
  if (kind === 'local') return LocalSandbox.create(opts);
  if (kind === 'none') return NoneSandbox.create({ install: opts.install, logger: opts.logger });
  throw new SandboxUnavailableError(`unknown sandbox backend ${JSON.stringify(kind)}: one of ${SANDBOX_KINDS.join(', ')}`);
}
