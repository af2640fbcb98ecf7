import { BadRequestException, Controller, Get, HttpCode, Inject, Post, Query, ServiceUnavailableException } from '@nestjs/common';
import { TrainerLifecycle } from '../runtime.provider';
import type { TrainerRuntime } from '../runtime';

/**
 * Internal API (not exposed to agents) for whoever drives a run: the trainer's state, its recent
 * steps, and pause/resume around a pinned evaluation (held-out tasks run on one policy version, so
 * no new version may be published while they run; batches keep queueing meanwhile). The embedded
 * main job calls the same TrainerRuntime methods in process.
 */
@Controller('internal/v1')
export class TrainerController {
  constructor(@Inject(TrainerLifecycle) private readonly lifecycle: TrainerLifecycle) {}

  @Get('state')
  state() {
    const rt = this.lifecycle.runtime;
    if (!rt) return { started: false, version: null, done: false, failure: null, position: null, totals: null };
    return {
      started: true,
      version: rt.currentVersion,
      done: rt.done,
      failure: rt.failure?.message ?? null,
      position: rt.dataPosition,
      totals: rt.totals,
    };
  }

  /** Steps with seq > after (see StepLog): the step reports, staleness, idle and busy time of each batch. */
  @Get('steps')
  steps(@Query('after') after?: string, @Query('limit') limit?: string) {
    const a = after === undefined ? 0 : Number(after);
    const l = limit === undefined ? 500 : Number(limit);
    if (!Number.isInteger(a) || a < 0) throw new BadRequestException('after: must be a non-negative integer');
    if (!Number.isInteger(l) || l < 1 || l > 5_000) throw new BadRequestException('limit: must be an integer in [1, 5000]');
    return this.lifecycle.steps.since(a, l);
  }

  /** Holds training after the batch in progress; answers once the trainer is idle, with the version it holds. */
  @Post('pause')
  @HttpCode(200)
  async pause() {
    const rt = this.started();
    await rt.pause();
    return { version: rt.currentVersion };
  }

  @Post('resume')
  @HttpCode(200)
  resume() {
    const rt = this.started();
    rt.resume();
    return { version: rt.currentVersion };
  }

  private started(): TrainerRuntime {
    const rt = this.lifecycle.runtime;
    if (!rt) throw new ServiceUnavailableException('the trainer has not started yet (see /readyz)');
    return rt;
  }
}
