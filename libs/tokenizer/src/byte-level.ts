/**
 * GPT-2's byte <-> printable-character table (`bytes_to_unicode`), used by every byte-level BPE
 * vocabulary (GPT-2, Llama 3, Qwen2/3): each byte is written as one visible character, so a
 * token string like "Ġworld" stands for the bytes " world".
 */
function buildTables(): { byteToChar: string[]; charToByte: Map<string, number> } {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const byteToChar = new Array<string>(256);
  const charToByte = new Map<string, number>();
  bs.forEach((b, i) => {
    const ch = String.fromCharCode(cs[i]);
    byteToChar[b] = ch;
    charToByte.set(ch, b);
  });
  return { byteToChar, charToByte };
}

const tables = buildTables();

export const BYTE_TO_CHAR: readonly string[] = tables.byteToChar;
export const CHAR_TO_BYTE: ReadonlyMap<string, number> = tables.charToByte;

const utf8 = new TextEncoder();

/**
 * The bytes a byte-level token string stands for, as the Rust `tokenizers` ByteLevel decoder
 * reads it: every character through the table, or, when some character is not in it (an added
 * token such as "<|im_end|>" written in plain text), the token's own UTF-8.
 */
export function byteLevelTokenBytes(token: string): Uint8Array {
  const out = new Uint8Array(token.length);
  let i = 0;
  for (const ch of token) {
    const b = CHAR_TO_BYTE.get(ch);
    if (b === undefined) return utf8.encode(token);
    out[i++] = b;
  }
  return out.subarray(0, i);
}

/** Concatenates byte arrays. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
