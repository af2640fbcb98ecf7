import type { GenerateRequest } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import type { Replica } from '../routing/replica';
import { NoReplicaAvailableError, type Router } from '../routing/router';

/**
 * The replica the next attempt runs on: the router's pick among those the generation has not
 * failed on. null when the generation should end with the tokens it has ('abort'): no replica is
 * left to resume on, or the pick cannot continue a constrained generation. With nothing produced
 * yet, no replica at all is an error (NoReplicaAvailableError).
 */
export function chooseReplica(
  router: Router,
  logger: Logger,
  req: Pick<GenerateRequest, 'requestId' | 'sessionId' | 'constraint'>,
  excluded: ReadonlySet<string>,
  produced: number,
): Replica | null {
  let replica: Replica;
  try {
    replica = router.route(req.sessionId, excluded).replica;
  } catch (err) {
    if (err instanceof NoReplicaAvailableError && produced > 0) {
      logger.warn('no replica left to resume on; returning the partial output', { requestId: req.requestId, tokens: produced });
      return null;
    }
    throw err;
  }
  // vLLM and SGLang compile a grammar from its start: a constrained call cannot continue
  // there after tokens produced by an earlier attempt (see InferenceBackend.resumesConstraints).
  if (req.constraint && produced > 0 && !replica.backend.resumesConstraints) {
    logger.warn('a constrained generation cannot resume on this backend; returning the partial output', {
      requestId: req.requestId,
      replica: replica.id,
      tokens: produced,
    });
    return null;
  }
  return replica;
}
