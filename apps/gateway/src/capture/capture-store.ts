import type { DataSource } from 'typeorm';
import { GatewayCall } from '@anvil/persistence';
import type { ChatMessage, ToolDefinition } from '@anvil/tokenizer';

/** What the next call of a session needs from an answered one to extend it token-exactly. */
export interface CaptureState {
  callId: string;
  sessionId: string;
  branchId: string;
  parentCallId: string | null;
  turnIndex: number;
  replyFingerprint: string;
  messages: ChatMessage[];
  assistantMessage: ChatMessage;
  tools: ToolDefinition[] | null;
  templateExtra: Record<string, unknown>;
  promptIds: readonly number[];
  outputIds: readonly number[];
}

/** Capture state in PostgreSQL (gateway_calls), so any gateway instance can continue any session. */
export class CaptureStore {
  constructor(private readonly ds: DataSource) {}

  async save(states: CaptureState[]): Promise<void> {
    if (states.length === 0) return;
    const rows: Partial<GatewayCall>[] = states.map((s) => ({
        id: s.callId,
        sessionId: s.sessionId,
        branchId: s.branchId,
        parentCallId: s.parentCallId,
        turnIndex: s.turnIndex,
        replyFingerprint: s.replyFingerprint,
        messagesJson: JSON.stringify(s.messages),
        assistantMessageJson: JSON.stringify(s.assistantMessage),
        toolsJson: s.tools ? JSON.stringify(s.tools) : null,
        templateExtraJson: JSON.stringify(s.templateExtra),
        promptIds: Int32Array.from(s.promptIds),
        outputIds: Int32Array.from(s.outputIds),
      }));
    await this.ds.getRepository(GatewayCall).insert(rows);
  }

  /**
   * The answered call whose (messages + reply) fingerprint is the longest prefix of a request's
   * message fingerprints (`prefixFingerprints[k]` = first k messages), or null. Among equal
   * matches (a retried request) the latest wins.
   */
  async findLongestPrefix(sessionId: string, prefixFingerprints: readonly string[]): Promise<CaptureState | null> {
    const candidates = prefixFingerprints.slice(1);
    if (candidates.length === 0) return null;
    const rows = await this.ds
      .getRepository(GatewayCall)
      .createQueryBuilder('c')
      .where('c.sessionId = :sessionId', { sessionId })
      .andWhere('c.replyFingerprint IN (:...fps)', { fps: candidates })
      .getMany();
    if (rows.length === 0) return null;
    const depth = (r: GatewayCall) => prefixFingerprints.lastIndexOf(r.replyFingerprint);
    rows.sort((a, b) => depth(b) - depth(a) || b.createdAt.getTime() - a.createdAt.getTime() || b.turnIndex - a.turnIndex);
    const r = rows[0];
    return {
      callId: r.id,
      sessionId: r.sessionId,
      branchId: r.branchId,
      parentCallId: r.parentCallId,
      turnIndex: r.turnIndex,
      replyFingerprint: r.replyFingerprint,
      messages: JSON.parse(r.messagesJson) as ChatMessage[],
      assistantMessage: JSON.parse(r.assistantMessageJson) as ChatMessage,
      tools: r.toolsJson ? (JSON.parse(r.toolsJson) as ToolDefinition[]) : null,
      templateExtra: JSON.parse(r.templateExtraJson) as Record<string, unknown>,
      promptIds: Array.from(r.promptIds),
      outputIds: Array.from(r.outputIds),
    };
  }
}
