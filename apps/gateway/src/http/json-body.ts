import type { FastifyInstance } from 'fastify';
import { ApiError } from '@anvil/service-kit';

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * JSON bodies are decoded strictly: invalid UTF-8 is a 400 (Fastify's default parser would turn
 * it into U+FFFD silently, and the agent's text would reach the model altered), as is a body
 * that is not JSON. Bodies over MAX_REQUEST_BYTES are refused with 413 before they are read in full.
 * Every other body (text/plain, form-encoded as `curl -d` sends it, none declared) is a 415 that
 * says what to send instead: parsed as text or a form, it would reach validation as a misleading 400.
 */
export function installJsonBodyParser(fastify: FastifyInstance, bodyLimit: number): void {
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser('*', (req, _payload, done) => {
    const declared = req.headers['content-type'];
    const what = declared
      ? `Content-Type \`${declared.split(';')[0].trim().slice(0, 100)}\` is not supported`
      : 'the request has a body but no Content-Type';
    done(
      new ApiError(
        415,
        'invalid_request_error',
        `${what}: send the body as JSON with \`Content-Type: application/json\``,
        'unsupported_media_type',
      ),
      undefined,
    );
  });
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, (_req, body, done) => {
    const bytes = body as Buffer;
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch {
      return done(new ApiError(400, 'invalid_request_error', 'the request body is not valid UTF-8', 'invalid_utf8'), undefined);
    }
    // An empty body (a bodiless POST such as /close) parses to nothing; endpoints that need one say so.
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(
        new ApiError(400, 'invalid_request_error', `the request body is not valid JSON: ${(err as Error).message}`, 'invalid_json'),
        undefined,
      );
    }
  });
}
