import { BadRequestException, Body, Controller, Get, HttpCode, Inject, Post } from '@nestjs/common';
import { z } from 'zod';
import { TaskFileError } from './tasks/jsonl';
import { ROLLOUT_RUNTIME } from './runtime.provider';
import type { RolloutRuntime } from './runtime';

const loadSchema = z.union([
  z.object({ spec: z.record(z.string(), z.unknown()), jsonl: z.string() }),
  z.object({
    spec: z.record(z.string(), z.unknown()),
    builtin: z.object({
      env: z.string(),
      seed: z.number().int(),
      trainCount: z.number().int().nonnegative(),
      evalCount: z.number().int().nonnegative(),
    }),
  }),
]);
const submitSchema = z.object({
  taskSetId: z.string().min(1),
  groupSize: z.number().int().positive().optional(),
  taskIds: z.array(z.string()).optional(),
  repeat: z.number().int().positive().max(10_000).optional(),
  shuffleSeed: z.number().int().nonnegative().max(0xffffffff).optional(),
});
const evalSchema = z.object({
  taskSetId: z.string().min(1),
  version: z.number().int().nonnegative(),
  samplesPerTask: z.number().int().positive().optional(),
  /** Sampling temperature of the evaluation rollouts (default: the task set's). */
  temperature: z.number().min(0).max(5).optional(),
  /** Names the evaluation (evaluation.completed.evalId, the eval rollouts' evalId); default a fresh uuid. */
  evalId: z.string().min(1).max(128).optional(),
});

function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) throw new BadRequestException(r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; '));
  return r.data;
}

/** Internal API (not exposed to agents): load task sets, submit groups, run evaluations, state. */
@Controller('internal/v1')
export class RolloutController {
  constructor(@Inject(ROLLOUT_RUNTIME) private readonly runtime: RolloutRuntime) {}

  @Post('task-sets')
  @HttpCode(201)
  async load(@Body() body: unknown) {
    const req = parse(loadSchema, body);
    try {
      if ('jsonl' in req) return await this.runtime.loadJsonl(req.spec as never, req.jsonl);
      return await this.runtime.loadBuiltin({ ...(req.spec as object), ...req.builtin } as never);
    } catch (err) {
      if (err instanceof TaskFileError) throw new BadRequestException({ message: err.message, problems: err.problems });
      throw new BadRequestException((err as Error).message);
    }
  }

  @Post('submissions')
  @HttpCode(202)
  submit(@Body() body: unknown) {
    return this.runtime.submit(parse(submitSchema, body));
  }

  @Post('evaluations')
  evaluate(@Body() body: unknown) {
    return this.runtime.runEvaluation(parse(evalSchema, body));
  }

  @Get('state')
  state() {
    return this.runtime.snapshot();
  }
}
