import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { ChatMessage } from '../environments/types';

/**
 * The answer file an agent left in its workspace, at most `cap` bytes, or null. The workspace was
 * the agent's, so the file is opened as the agent may have left it: a symlink is not followed (it
 * could point at any host file the manager may read) and a FIFO does not block; only a regular
 * file is read.
 */
export async function readAnswerFile(path: string, cap: number): Promise<string | null> {
  let file;
  try {
    file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = await file.stat();
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(cap, st.size));
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await file.close();
  }
}

/**
 * What an agent answered: its answer file ({"finalAnswer", "messages"} JSON, or plain text), else
 * the last line of its stdout (a {"finalAnswer"} JSON line, or the line itself).
 */
export function answerOf(answerText: string | null, stdoutTail: string): { finalAnswer: string | null; messages: ChatMessage[] | null } {
  if (answerText !== null) {
    try {
      const v = JSON.parse(answerText) as { finalAnswer?: unknown; messages?: unknown };
      if (v && typeof v === 'object' && !Array.isArray(v)) {
        const messages = Array.isArray(v.messages) ? (v.messages as ChatMessage[]) : null;
        let finalAnswer = typeof v.finalAnswer === 'string' ? v.finalAnswer : null;
        if (finalAnswer === null && messages) {
          const last = [...messages].reverse().find((m) => m.role === 'assistant');
          finalAnswer = last && !last.tool_calls?.length ? last.content : null;
        }
        return { finalAnswer, messages };
      }
    } catch {
      /* plain text answer */
    }
    return { finalAnswer: answerText.trim(), messages: null };
  }
  const lines = stdoutTail
    .trim()
    .split('\n')
    .filter((l) => l.trim() !== '');
  const last = lines[lines.length - 1] ?? null;
  if (last === null) return { finalAnswer: null, messages: null };
  try {
    const v = JSON.parse(last) as { finalAnswer?: unknown };
    if (v && typeof v === 'object' && 'finalAnswer' in v)
      return { finalAnswer: v.finalAnswer === null || v.finalAnswer === undefined ? null : String(v.finalAnswer), messages: null };
  } catch {
    /* not JSON */
  }
  return { finalAnswer: last.trim(), messages: null };
}
