/**
 * The starting weights of a run: the built-in tiny model's warm start (built or taken from the
 * cache; see warm-start.ts), or a user's Hugging Face model directory as given (warm-started only
 * when warmStart.enabled asks), with how the gateway serves it. Every way to run starts from it.
 */
import { chainAddConfigOf, type RunConfig } from '../config/run-config';
import { ensureKnownModel, isKnownModelName } from '../config/known-models';
import type { RunModel } from '../config/service-settings';
import { warmStart } from '../warm-start/warm-start';
import { servedModelName } from './task-set';

/** The starting weights: the (cached) warm start, or a user's model directory as given. */
export async function startingModel(
  cfg: RunConfig,
  log: (line: string) => void,
): Promise<{ model: RunModel; warmStart: Record<string, unknown> }> {
  const userDir =
    cfg.model === 'tiny' ? null : isKnownModelName(cfg.model) ? await ensureKnownModel(cfg.model, cfg.dataDir, log) : cfg.model;
  const served = servedModelName(cfg);
  if (userDir && cfg.warmStart.enabled !== true) {
    log(`model: ${userDir} (served as ${served}), RL starts from its weights as given (no warm start)`);
    return { model: { checkpointDir: userDir, chatFormatDir: userDir, servedName: served }, warmStart: { enabled: false, model: userDir } };
  }
  // The tiny model with warmStart.enabled false starts from its random init: a warm start of 0 steps.
  const budget = cfg.warmStart.enabled === false ? { ...cfg.warmStart, steps: 0 } : cfg.warmStart;
  // Tool delays are rollout dynamics: the warm start's validation episodes run without them.
  const { toolDelay: _delay, ...task } = chainAddConfigOf(cfg) as ReturnType<typeof chainAddConfigOf> & { toolDelay?: unknown };
  // Cached; built on WARM_START_THREADS engine threads whatever engineThreads says.
  const ws = await warmStart({ ...budget, task, dataDir: cfg.dataDir, ...(userDir ? { base: userDir } : {}) }, log);
  log(
    `warm start: ${ws.cached ? 'cached' : 'built'} ${ws.dir} (seed ${cfg.warmStart.seed}, ${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations${ws.cached ? '' : `, ${ws.seconds.toFixed(0)} s`})`,
  );
  return {
    model: { checkpointDir: ws.dir, chatFormatDir: userDir, servedName: served },
    warmStart: {
      cached: ws.cached,
      seconds: Number(ws.seconds.toFixed(1)),
      seed: cfg.warmStart.seed,
      sftSteps: ws.steps,
      demonstrations: ws.demonstrations,
      ...(userDir ? { base: userDir } : {}),
    },
  };
}
