import type { FastifyInstance } from 'fastify';
import { ApiError } from '@anvil/service-kit';

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/** Deepest array/object nesting a body may have: far beyond any real request (tool schemas nest a few levels), far below what recursive code downstream survives. */
export const MAX_JSON_DEPTH = 100;

/** Whether `text` (JSON) nests arrays and objects deeper than `limit`: one pass over the text, before anything is built from it. */
export function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * JSON bodies are decoded strictly: invalid UTF-8 is a 400 (Fastify's default parser would turn
 * it into U+FFFD silently, and the agent's text would reach the model altered), as is a body
 * that is not JSON, and so is JSON nested deeper than MAX_JSON_DEPTH. Bodies over MAX_REQUEST_BYTES are refused with 413 before they are read in full.
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
    // Deep nesting parses, but the recursive code after the parser (schema checks, canonical JSON
    // of tools, template rendering) would overflow its stack on it: refused here, with a reason.
    if (nestsDeeperThan(text, MAX_JSON_DEPTH))
      return done(
        new ApiError(
          400,
          'invalid_request_error',
          `the request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`,
          'json_too_deep',
        ),
        undefined,
      );
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
