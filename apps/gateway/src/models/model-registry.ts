import { loadChatFormat, tinyChatFormat, type ChatFormat } from '@anvil/tokenizer';
import type { GatewaySession } from '@anvil/persistence';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';

/** The model this gateway serves: its name, chat format and context size. */
export interface ServedModel {
  name: string;
  format: ChatFormat;
  maxContextTokens: number;
  /** Unix seconds, for /v1/models' `created`. */
  created: number;
}

/**
 * The served model(s), from config. One model per gateway today (one policy is trained at a
 * time); requests and sessions naming another model get 404 model_not_found.
 */
export class ModelRegistry {
  private readonly models = new Map<string, ServedModel>();

  constructor(models: ServedModel[]) {
    for (const m of models) this.models.set(m.name, m);
  }

  static fromConfig(
    config: Pick<GatewayConfig, 'GATEWAY_MODEL_NAME' | 'GATEWAY_CHAT_FORMAT' | 'GATEWAY_TOKENIZER_DIR' | 'GATEWAY_MAX_CONTEXT_TOKENS'> &
      Partial<Pick<GatewayConfig, 'GATEWAY_TOOL_PROMPT'>>,
  ): ModelRegistry {
    const format =
      config.GATEWAY_CHAT_FORMAT === 'hf'
        ? loadChatFormat(config.GATEWAY_TOKENIZER_DIR ?? '', { toolPrompt: config.GATEWAY_TOOL_PROMPT ?? 'auto' })
        : tinyChatFormat();
    return new ModelRegistry([
      {
        name: config.GATEWAY_MODEL_NAME,
        format,
        maxContextTokens: config.GATEWAY_MAX_CONTEXT_TOKENS,
        created: Math.floor(Date.now() / 1000),
      },
    ]);
  }

  get(name: string): ServedModel | undefined {
    return this.models.get(name);
  }

  list(): ServedModel[] {
    return [...this.models.values()];
  }
}

/** The model a request names, which must be served and be its session's (404 model_not_found, 400 another session's model). */
export function servedModelFor(registry: ModelRegistry, session: GatewaySession, name: string): ServedModel {
  const model = registry.get(name);
  if (!model) throw GatewayError.modelNotFound(name);
  if (name !== session.model)
    throw GatewayError.invalid(`this session serves model \`${session.model}\`, not \`${name}\``, 'model', 'model_not_found');
  return model;
}
