import { chmodSync, cpSync, existsSync, lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Inside every local sandbox. */
export const SANDBOX_UID = 1000;
export const SANDBOX_HOME = '/home/agent';

/**
 * The /etc entries a program needs and that say nothing about the host: the dynamic linker's
 * cache, TLS roots, alternatives (Debian's /usr/bin/python3-style links), time zone, name-service
 * configuration. No resolv.conf (there is no network to resolve on), no passwd/group/hosts of
 * the host (the sandbox gets its own), nothing else.
 */
export const ETC_ENTRIES = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'ssl',
  'ca-certificates',
  'ca-certificates.conf',
  'pki',
  'crypto-policies',
  'alternatives',
  'localtime',
  'timezone',
  'nsswitch.conf',
  'host.conf',
  'gai.conf',
  'protocols',
  'services',
  'mime.types',
];

/** The sandbox's own /etc/passwd, /etc/group and /etc/hosts. */
export function etcFiles(): Record<'passwd' | 'group' | 'hosts', string> {
  return {
    passwd:
      'root:x:0:0:root:/root:/usr/sbin/nologin\n' +
      `agent:x:${SANDBOX_UID}:${SANDBOX_UID}:agent:${SANDBOX_HOME}:/bin/sh\n` +
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
    group: `root:x:0:\nagent:x:${SANDBOX_UID}:\nnogroup:x:65534:\n`,
    hosts: '127.0.0.1\tlocalhost anvil-sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n',
  };
}

/**
 * The sandboxes' /etc as one prepared directory, mounted read-only with one bind: a bind per
 * entry cost a millisecond of CPU per sandbox in mount setup, a quarter of what the sandbox
 * costs a run. The copy is checked against the host's entries at most once a second (their and
 * their subdirectories' modification times, a few dozen lstat calls) and made again when one
 * changed, so a library installed or a CA added while the host runs reaches the sandboxes.
 *
 * The directory is `<prefix><pid>-etc-*` under the runtime base, so the cleanup of a dead host's
 * run directories removes it too.
 */
export class SandboxEtc {
  private static readonly perBase = new Map<string, SandboxEtc>();

  /** The one prepared /etc of this process under `base`, however many backends it creates there. */
  static shared(base: string, prefix: string): SandboxEtc {
    const key = `${base}\0${prefix}`;
    let etc = SandboxEtc.perBase.get(key);
    if (!etc) SandboxEtc.perBase.set(key, (etc = new SandboxEtc(base, prefix)));
    return etc;
  }

  private dir: string | null = null;
  private stamp = '';
  private paths: string[] = [];
  private checkedAt = -Infinity;
  /** Replaced copies and when: removed a minute later, once every sandbox that was given one has mounted it. */
  private retired: { dir: string; at: number }[] = [];

  constructor(
    private readonly base: string,
    private readonly prefix: string,
    private readonly hostEtc = '/etc',
  ) {}

  /** The prepared directory, current with the host's /etc as of at most `CHECK_EVERY_MS` ago. */
  current(now = Date.now()): string {
    if (this.dir && now - this.checkedAt < CHECK_EVERY_MS) return this.dir;
    this.checkedAt = now;
    if (this.dir && this.fingerprint(this.paths) === this.stamp && existsSync(this.dir)) return this.dir;
    this.paths = this.watched();
    const stamp = this.fingerprint(this.paths);
    const fresh = mkdtempSync(join(this.base, `${this.prefix}${process.pid}-etc-`));
    chmodSync(fresh, 0o755); // bwrap mounts it as the sandbox's uid
    for (const name of ETC_ENTRIES) {
      const src = join(this.hostEtc, name);
      if (!existsSync(src) && !isLink(src)) continue;
      // Symlinks stay as they are (e.g. localtime -> /usr/share/zoneinfo/..., resolved inside);
      // what the sandbox's uid could not read on the host (ssl/private) is not copied at all.
      cpSync(src, join(fresh, name), { recursive: true, verbatimSymlinks: true, preserveTimestamps: true, filter: readableByOthers });
    }
    for (const [name, text] of Object.entries(etcFiles())) writeFileSync(join(fresh, name), text, { mode: 0o644 });
    if (this.dir) this.retired.push({ dir: this.dir, at: Date.now() });
    this.dir = fresh;
    this.stamp = stamp;
    this.removeRetired(Date.now() - RETIRED_KEPT_MS);
    return fresh;
  }

  /** Removes the copies replaced before `before` (every one with the default). */
  removeRetired(before = Infinity): void {
    const keep = this.retired.filter((r) => r.at >= before);
    for (const r of this.retired) if (r.at < before) rmSync(r.dir, { recursive: true, force: true });
    this.retired = keep;
  }

  /** The host paths whose modification times say whether the copy is current: each entry, and each directory below one. */
  private watched(): string[] {
    const paths: string[] = [];
    for (const name of ETC_ENTRIES) {
      const p = join(this.hostEtc, name);
      paths.push(p);
      if (mtimeOf(p) !== null && lstatSync(p).isDirectory())
        for (const sub of readdirSync(p, { withFileTypes: true })) if (sub.isDirectory()) paths.push(join(p, sub.name));
    }
    return paths;
  }

  private fingerprint(paths: string[]): string {
    return paths.map((p) => mtimeOf(p)).join('|');
  }
}

const RETIRED_KEPT_MS = 60_000;
const CHECK_EVERY_MS = 1000;

function readableByOthers(src: string): boolean {
  const s = lstatSync(src);
  if (s.isSymbolicLink()) return true;
  return (s.mode & 0o004) !== 0 && (!s.isDirectory() || (s.mode & 0o001) !== 0);
}

function mtimeOf(p: string): number | null {
  try {
    return lstatSync(p).mtimeMs;
  } catch {
    return null;
  }
}

function isLink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}
