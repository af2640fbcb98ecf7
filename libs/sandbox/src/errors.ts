/** A spec that cannot run as written: every problem at once, before anything starts. */
export class SandboxSpecError extends Error {
  override readonly name = 'SandboxSpecError';
  constructor(
    readonly label: string,
    readonly problems: string[],
  ) {
    super(`sandbox spec ${JSON.stringify(label)}: ${problems.join('; ')}`);
  }
}

/**
 * The backend cannot work on this machine (a tool missing and not installable, a kernel that
 * forbids user namespaces): the message says what to do. Never answered by running unsandboxed.
 */
export class SandboxUnavailableError extends Error {
  override readonly name = 'SandboxUnavailableError';
}

/** A promise of the backend itself broke (a process outlived its sandbox): loud, never a result. */
export class SandboxBreachError extends Error {
  override readonly name = 'SandboxBreachError';
}
