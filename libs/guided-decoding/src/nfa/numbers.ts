import type { NfaBuilder } from './nfa';

/**
 * JSON numbers as automata: unbounded numbers and integers by their JSON grammar, bounded
 * integers by the classic digit-range construction (numbers of each digit count, split on the
 * first digit where the bounds differ), and numbers whose bounds are integers by integer part +
 * fraction (a fraction may only follow an integer part strictly inside the bounds, or must be
 * zero at an inclusive bound, or non-zero just above an exclusive lower bound). No exponent in a
 * bounded number. Bounds are bigints (`null` = unbounded).
 */
const ZERO = 0x30;
const ONE = 0x31;
const NINE = 0x39;
const MINUS = 0x2d;
const DOT = 0x2e;

const digit = (b: NfaBuilder, from: number) => b.charRange(from, ZERO, NINE);
const digits = (b: NfaBuilder, from: number, n: number) => {
  let s = from;
  for (let i = 0; i < n; i++) s = digit(b, s);
  return s;
};
/** One or more digits. */
const digitRun = (b: NfaBuilder, from: number) => b.star(digit(b, from), (s) => digit(b, s));

/** `-?(0|[1-9][0-9]*)` */
export function anyInteger(b: NfaBuilder, from: number): number {
  const signed = b.optional(from, (s) => b.char(s, MINUS));
  return b.alt(signed, [(s) => b.char(s, ZERO), (s) => b.star(b.charRange(s, ONE, NINE), (t) => digit(b, t))]);
}

/** `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` */
export function anyNumber(b: NfaBuilder, from: number): number {
  const int = anyInteger(b, from);
  const frac = b.optional(int, (s) => digitRun(b, b.char(s, DOT)));
  return b.optional(frac, (s) => {
    const e = b.alt(s, [(t) => b.char(t, 0x65), (t) => b.char(t, 0x45)]);
    const signed = b.optional(e, (t) => b.alt(t, [(u) => b.char(u, 0x2b), (u) => b.char(u, MINUS)]));
    return digitRun(b, signed);
  });
}

/** Fixed-length digit strings d with lo <= d <= hi (lo, hi: digit strings of one length). */
function fixedLength(b: NfaBuilder, from: number, lo: string, hi: string): number {
  if (lo.length === 0) return from;
  const a = lo.charCodeAt(0);
  const z = hi.charCodeAt(0);
  const n = lo.length - 1;
  if (a === z) return fixedLength(b, b.char(from, a), lo.slice(1), hi.slice(1));
  if (/^0*$/.test(lo.slice(1)) && /^9*$/.test(hi.slice(1))) return digits(b, b.charRange(from, a, z), n);
  const end = b.state();
  b.epsilon(fixedLength(b, b.char(from, a), lo.slice(1), '9'.repeat(n)), end);
  if (a + 1 <= z - 1) b.epsilon(digits(b, b.charRange(from, a + 1, z - 1), n), end);
  b.epsilon(fixedLength(b, b.char(from, z), '0'.repeat(n), hi.slice(1)), end);
  return end;
}

const pow10 = (n: number) => 10n ** BigInt(n);

/** Non-negative integers in [lo, hi] without leading zeros; null when the range is empty. */
export function nonNegativeIntegers(b: NfaBuilder, from: number, lo: bigint, hi: bigint | null): number | null {
  if (lo < 0n) lo = 0n;
  if (hi !== null && hi < lo) return null;
  const end = b.state();
  const loLen = lo.toString().length;
  const hiLen = hi === null ? loLen : hi.toString().length;
  for (let len = loLen; len <= hiLen; len++) {
    const a = lo > (len === 1 ? 0n : pow10(len - 1)) ? lo : len === 1 ? 0n : pow10(len - 1);
    const cap = pow10(len) - 1n;
    const z = hi === null || hi > cap ? cap : hi;
    if (a > z) continue;
    b.epsilon(fixedLength(b, from, a.toString(), z.toString()), end);
  }
  if (hi === null) {
    // every number with more digits than lo: [1-9][0-9]{loLen}[0-9]*
    const head = digits(b, b.charRange(from, ONE, NINE), loLen);
    b.epsilon(
      b.star(head, (s) => digit(b, s)),
      end,
    );
  }
  return end;
}

/** Integers in [lo, hi] (either side null = unbounded); null when none. */
export function boundedIntegers(b: NfaBuilder, from: number, lo: bigint | null, hi: bigint | null): number | null {
  const parts: ((s: number) => number)[] = [];
  if (hi === null || hi >= 0n) {
    const pos = (s: number) => nonNegativeIntegers(b, s, lo === null || lo < 0n ? 0n : lo, hi) as number;
    if (hi === null || (lo === null ? 0n : lo < 0n ? 0n : lo) <= hi) parts.push(pos);
  }
  if (lo === null || lo < 0n) {
    // -m with m in [max(-hi, 1), -lo]
    const mLo = hi !== null && hi < 0n ? -hi : 1n;
    const mHi = lo === null ? null : -lo;
    if (mHi === null || mLo <= mHi) parts.push((s) => nonNegativeIntegers(b, b.char(s, MINUS), mLo, mHi) as number);
  }
  if (parts.length === 0) return null;
  return parts.length === 1 ? parts[0](from) : b.alt(from, parts);
}

/** `.` [0-9]+ */
const anyFraction = (b: NfaBuilder, from: number) => digitRun(b, b.char(from, DOT));
/** `.` 0+ */
const zeroFraction = (b: NfaBuilder, from: number) => b.star(b.char(b.char(from, DOT), ZERO), (s) => b.char(s, ZERO));
/** `.` [0-9]* [1-9] [0-9]* */
const nonZeroFraction = (b: NfaBuilder, from: number) => {
  const lead = b.star(b.char(from, DOT), (s) => digit(b, s));
  return b.star(b.charRange(lead, ONE, NINE), (s) => digit(b, s));
};

/** Magnitudes y >= 0 (no sign) with L <= y <= H (each side exclusive when flagged; H null = unbounded). */
function boundedMagnitude(b: NfaBuilder, from: number, L: bigint, Lx: boolean, H: bigint | null, Hx: boolean): number | null {
  const parts: ((s: number) => number)[] = [];
  const lit = (s: number, n: bigint) => b.text(s, n.toString());
  // integer part strictly inside: any fraction
  const innerHi = H === null ? null : H - 1n;
  if (innerHi === null || L + 1n <= innerHi)
    parts.push((s) => b.optional(nonNegativeIntegers(b, s, L + 1n, innerHi) as number, (t) => anyFraction(b, t)));
  if (H === null || L < H) {
    if (!Lx) parts.push((s) => b.optional(lit(s, L), (t) => anyFraction(b, t)));
    else parts.push((s) => nonZeroFraction(b, lit(s, L)));
    if (H !== null && !Hx) parts.push((s) => b.optional(lit(s, H), (t) => zeroFraction(b, t)));
  } else if (L === H && !Lx && !Hx) {
    parts.push((s) => b.optional(lit(s, L), (t) => zeroFraction(b, t)));
  }
  if (parts.length === 0) return null;
  return b.alt(from, parts);
}

export interface NumberBounds {
  lo: bigint | null;
  loExclusive: boolean;
  hi: bigint | null;
  hiExclusive: boolean;
}

/** Numbers (fractions allowed, no exponent) within integer bounds; null when none. */
export function boundedNumbers(b: NfaBuilder, from: number, { lo, loExclusive, hi, hiExclusive }: NumberBounds): number | null {
  const parts: ((s: number) => number)[] = [];
  if (hi === null || hi > 0n || (hi === 0n && !hiExclusive)) {
    const below = lo === null || lo < 0n;
    const L = below ? 0n : (lo as bigint);
    const Lx = below ? false : loExclusive;
    parts.push((s) => boundedMagnitude(b, s, L, Lx, hi, hiExclusive) ?? b.state());
  }
  if (lo === null || lo < 0n) {
    // x = -y: y <= -lo, and y >= -hi when hi <= 0 (else y >= 0)
    const L = hi !== null && hi <= 0n ? -hi : 0n;
    const Lx = hi !== null && hi <= 0n ? hiExclusive : false;
    const H = lo === null ? null : -lo;
    parts.push((s) => boundedMagnitude(b, b.char(s, MINUS), L, Lx, H, loExclusive) ?? b.state());
  }
  if (parts.length === 0) return null;
  return parts.length === 1 ? parts[0](from) : b.alt(from, parts);
}
