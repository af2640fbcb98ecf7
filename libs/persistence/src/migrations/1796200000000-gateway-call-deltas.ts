import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Capture rows as deltas, so a session's storage grows with its length, not with the square
 * of it (a whole row per call stores the whole history again every turn). A row that extends its parent now stores only
 * what is new: `prompt_prefix_tokens` leading prompt ids are the parent's prompt + output ids
 * (`prompt_ids` holds the rest), and `messages_prefix_count` leading messages are the parent's
 * messages + its reply (`messages_json` holds the rest). 0 means the row is whole, which is
 * what every existing row is, so no data changes.
 */
export class GatewayCallDeltas1796200000000 implements MigrationInterface {
  name = 'GatewayCallDeltas1796200000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "gateway_calls" ADD "prompt_prefix_tokens" integer NOT NULL DEFAULT 0`);
    await queryRunner.query(`ALTER TABLE "gateway_calls" ADD "messages_prefix_count" integer NOT NULL DEFAULT 0`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    // The previous code reads every row as whole: rebuild the delta rows first (parents before
    // children; JSON is concatenated as text values parsed and re-serialised in their key order).
    interface Row {
      id: string;
      parent_call_id: string | null;
      prompt_prefix_tokens: number;
      messages_prefix_count: number;
      messages_json: string;
      assistant_message_json: string;
      prompt_ids: Buffer;
      output_ids: Buffer;
    }
    const whole = new Map<string, { messages: unknown[]; assistant: unknown; sequence: Buffer }>();
    const load = async (id: string): Promise<{ messages: unknown[]; assistant: unknown; sequence: Buffer }> => {
      const known = whole.get(id);
      if (known) return known;
      const [r]: Row[] = await queryRunner.query(`SELECT * FROM "gateway_calls" WHERE "id" = $1`, [id]);
      if (!r) throw new Error(`gateway_calls ${id} is missing: a delta row's parent cannot be rebuilt`);
      let messages = JSON.parse(r.messages_json) as unknown[];
      let prompt = Buffer.from(r.prompt_ids);
      if ((r.prompt_prefix_tokens > 0 || r.messages_prefix_count > 0) && r.parent_call_id) {
        const parent = await load(r.parent_call_id);
        prompt = Buffer.concat([parent.sequence.subarray(0, r.prompt_prefix_tokens * 4), prompt]);
        messages = [...[...parent.messages, parent.assistant].slice(0, r.messages_prefix_count), ...messages];
        await queryRunner.query(
          `UPDATE "gateway_calls" SET "prompt_ids" = $2, "messages_json" = $3, "prompt_prefix_tokens" = 0, "messages_prefix_count" = 0 WHERE "id" = $1`,
          [id, prompt, JSON.stringify(messages)],
        );
      }
      const state = {
        messages,
        assistant: JSON.parse(r.assistant_message_json) as unknown,
        sequence: Buffer.concat([prompt, Buffer.from(r.output_ids)]),
      };
      whole.set(id, state);
      return state;
    };
    const deltas: { id: string }[] = await queryRunner.query(
      `SELECT "id" FROM "gateway_calls" WHERE "prompt_prefix_tokens" > 0 OR "messages_prefix_count" > 0 ORDER BY "session_id", "turn_index"`,
    );
    for (const { id } of deltas) await load(id);
    await queryRunner.query(`ALTER TABLE "gateway_calls" DROP COLUMN "messages_prefix_count"`);
    await queryRunner.query(`ALTER TABLE "gateway_calls" DROP COLUMN "prompt_prefix_tokens"`);
  }
}
