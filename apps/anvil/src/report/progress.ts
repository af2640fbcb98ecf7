// The main job's live progress line: step, mean reward, held-out success, tokens/s, staleness, ETA.
// On a terminal it rewrites one line; in a log (CI, a pipe) it prints a line every few seconds.

export class Progress {
  private last: { step: number; version: number; reward: number | null; staleness: number; tokensPerSec: number; wallS: number } | null =
    null;
  private heldOut: { version: number; success: number } | null = null;
  private timer: NodeJS.Timeout | null = null;
  private startedAt = 0;
  private rewards: number[] = [];
  /** The step of the last line printed (null before any). */
  private printedStep: number | null = null;
  private readonly tty = process.stdout.isTTY === true;

  constructor(
    private readonly totalSteps: number,
    /** What the loop is doing while no step has happened yet (rollouts running / finished). */
    private readonly waitingLine: () => string = () => '',
  ) {}

  start(): void {
    this.startedAt = performance.now();
    this.timer = setInterval(() => this.print(), this.tty ? 1000 : 5000);
    this.timer.unref();
  }

  stop(): void {
    const running = this.timer !== null;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.tty && this.last) process.stdout.write('\n');
    // A log shows where the phase ended, not only where it was at the last 5-second tick (a short run
    // may end between two ticks and never print a step at all).
    else if (!this.tty && running && this.last && this.last.step !== this.printedStep) console.log(this.line());
  }

  step(s: { step: number; version: number; reward: number | null; staleness: number; tokensPerSec: number; wallS: number }): void {
    this.last = s;
    if (s.reward !== null) this.rewards = [...this.rewards.slice(-4), s.reward];
  }

  evaluated(version: number, success: number, seconds: number): void {
    this.heldOut = { version, success };
    const line = `held-out success ${(success * 100).toFixed(1)}% at policy version ${version} (evaluation ${seconds.toFixed(1)} s)`;
    if (this.tty) process.stdout.write(`\r\x1b[2K${line}\n`);
    else console.log(line);
  }

  line(): string {
    const s = this.last;
    const elapsed = (performance.now() - this.startedAt) / 1000;
    const step = s?.step ?? 0;
    const eta = step > 0 ? ((this.totalSteps - step) * elapsed) / step : NaN;
    const reward = this.rewards.length ? this.rewards.reduce((a, b) => a + b, 0) / this.rewards.length : NaN;
    const fmt = (v: number, d: number) => (Number.isFinite(v) ? v.toFixed(d) : '-');
    return [
      `step ${step}/${this.totalSteps}`,
      `v${s?.version ?? 0}`,
      `reward ${fmt(reward, 3)}`,
      `held-out ${this.heldOut ? `${(this.heldOut.success * 100).toFixed(1)}% (v${this.heldOut.version})` : '-'}`,
      `${s ? Math.round(s.tokensPerSec) : '-'} train tok/s`,
      `staleness ${s ? s.staleness.toFixed(2) : '-'} versions`,
      `ETA ${Number.isFinite(eta) ? `${Math.floor(eta / 60)}m${String(Math.round(eta % 60)).padStart(2, '0')}s` : '-'}`,
    ].join(' | ');
  }

  private print(): void {
    const line = this.last ? this.line() : `waiting for the first train batch: ${this.waitingLine()}`;
    this.printedStep = this.last?.step ?? null;
    if (this.tty) process.stdout.write(`\r\x1b[2K${line}`);
    else console.log(line);
  }
}
