import { Catch, HttpException, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply } from 'fastify';

/**
 * Errors raised before a handler runs (a body that is not JSON, too large, wrong content type)
 * get the same OpenAI-style body as the handlers' own errors, so the gateway parses one shape.
 */
@Catch(HttpException)
export class OpenAiErrorFilter implements ExceptionFilter {
  catch(exception: HttpException, host: ArgumentsHost): void {
    const reply = host.switchToHttp().getResponse<FastifyReply>();
    const status = exception.getStatus();
    const response = exception.getResponse();
    const message = typeof response === 'string' ? response : String((response as { message?: unknown }).message ?? exception.message);
    void reply.status(status).send({
      error: { message, type: status < 500 ? 'invalid_request_error' : 'server_error', param: null, code: status === 404 ? 'not_found' : status < 500 ? 'invalid_body' : null },
    });
  }
}
