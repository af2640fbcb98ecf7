import { describe, expect, it } from 'vitest';
import { applyReportLine, emptyReport, lineReader } from './supervisor-protocol';

describe('supervisor protocol', () => {
  it('follows a run with a setup command through its lines', () => {
    const r = emptyReport();
    const lines: string[] = [];
    const feed = lineReader((l) => lines.push(l));
    feed(Buffer.from('listening\nsetup-st'));
    feed(Buffer.from('art\nsetup-end exit 0\ncommand-start\ncommand-end signal 9 cpu 2.500\n'));
    lines.forEach((l, i) => applyReportLine(r, l, 10 * i));
    expect(r).toEqual({
      listening: true,
      setupStarted: true,
      setupEnd: { exitCode: 0, signal: null },
      commandStartMs: 30,
      commandEnd: { exitCode: null, signal: 9, cpuSeconds: 2.5 },
      error: null,
    });
  });

  it('keeps the first error and ignores lines it does not know', () => {
    const r = emptyReport();
    applyReportLine(r, 'error command nosuch: No such file or directory', 1);
    applyReportLine(r, 'error setup other', 2);
    applyReportLine(r, 'something new 1 2 3', 3);
    applyReportLine(r, 'command-end exit x cpu 1', 4);
    expect(r.error).toEqual({ phase: 'command', message: 'nosuch: No such file or directory' });
    expect(r.commandEnd).toBeNull();
  });
});
