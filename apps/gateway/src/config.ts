import { z } from 'zod';
import { httpUrl, port, positiveInt, secret, serviceBaseEnv } from '@anvil/config';

const nonNegativeInt = (fallback: number) => z.coerce.number().int().nonnegative().default(fallback);
const flag = (fallback: 'true' | 'false') =>
  z
    .enum(['true', 'false'])
    .default(fallback)
    .transform((v) => v === 'true');

export const gatewayEnv = z
  .object({
    ...serviceBaseEnv,
    PORT: port(8080),
    HOST: z.string().default('127.0.0.1'),
    /** Credential of the admin API the rollout manager uses to open and close sessions. */
    GATEWAY_ADMIN_TOKEN: secret(32),
    INFERENCE_PROXY_URL: httpUrl(),
    /** Largest request body accepted (413 beyond). */
    MAX_REQUEST_BYTES: positiveInt(4 * 1024 * 1024),
    /** The served model's name: what /v1/models lists and requests must name. */
    GATEWAY_MODEL_NAME: z.string().min(1).max(128).default('anvil-tiny'),
    /** The model family's tokenizer and chat template: the built-in tiny model, or a Hugging Face directory. */
    GATEWAY_CHAT_FORMAT: z.enum(['tiny', 'hf']).default('tiny'),
    /** With GATEWAY_CHAT_FORMAT=hf: tokenizer.json, tokenizer_config.json, the chat template. */
    GATEWAY_TOKENIZER_DIR: z.string().optional(),
    /**
     * How tools reach the model: `template` (its chat template renders them), `system` (the gateway
     * writes them into the system prompt and reads Hermes `<tool_call>` blocks back, for templates
     * without tool support), or `auto` (detected from the template).
     */
    GATEWAY_TOOL_PROMPT: z.enum(['auto', 'template', 'system']).default('auto'),
    /** Prompt + output tokens one call may use. */
    GATEWAY_MAX_CONTEXT_TOKENS: positiveInt(8192),
    /** max_tokens when the request sets none (clamped to what the context leaves). */
    GATEWAY_DEFAULT_MAX_TOKENS: positiveInt(1024),
    /** Largest `n` (choices per request). */
    GATEWAY_MAX_N: positiveInt(16),
    /** η of DESIGN.md "Staleness": current policy version − oldest in-flight session's start version may not exceed it. */
    MAX_STALENESS: nonNegativeInt(4),
    /** Seconds a refused first call is told to wait (Retry-After). */
    GATEWAY_RETRY_AFTER_S: positiveInt(2),
    /** Policy version assumed until a policy_version.activated arrives (the proxy's INITIAL_POLICY_VERSION). */
    INITIAL_POLICY_VERSION: nonNegativeInt(0),
    /** Consumer group for policy_version.activated. */
    GATEWAY_POLICY_GROUP: z.string().min(1).default('anvil.gateway.policy'),
    /** Public base URL agents reach this gateway at (session base URLs are built on it); default: the admin request's Host. */
    GATEWAY_PUBLIC_URL: httpUrl().optional(),
    /** Apply committed migrations (under the shared advisory lock) at start: the gateway's tables must exist before it serves. */
    DB_MIGRATE_ON_START: flag('true'),
    /** One generation may take at most this long at the inference-proxy. */
    GATEWAY_GENERATION_TIMEOUT_MS: positiveInt(600_000),
    /**
     * on: every answered call is recorded durably (llm_call.recorded) and its capture state saved
     * before the answer. off: neither (no records, no token-exact extension: every call starts a
     * branch, no turn is reserved so callCount does not move); for serving without training and
     * for measuring the bare hop (npm run bench -- gateway).
     */
    GATEWAY_CAPTURE: z.enum(['on', 'off']).default('on'),
    /**
     * Outbox rows this old are published by this gateway's sweeper even though another gateway
     * wrote them (it died between commit and publish, or was restarted): longer than a publish
     * normally takes, so live gateways' rows are left to them.
     */
    GATEWAY_OUTBOX_STALE_MS: nonNegativeInt(10_000),
    /** How often the sweeper looks for such rows (and once at start). */
    GATEWAY_OUTBOX_SWEEP_MS: positiveInt(5_000),
  })
  .superRefine((env, ctx) => {
    if (env.GATEWAY_CHAT_FORMAT === 'hf' && !env.GATEWAY_TOKENIZER_DIR) {
      ctx.addIssue({ code: 'custom', path: ['GATEWAY_TOKENIZER_DIR'], message: 'is required when GATEWAY_CHAT_FORMAT=hf' });
    }
  });
export type GatewayConfig = z.infer<typeof gatewayEnv>;
