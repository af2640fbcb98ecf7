import {
  BackendUnavailableError,
  type BackendGenerateRequest,
  type BackendHealth,
  type FinishReason,
  type LoadWeightsRequest,
} from './backend';
import { ExternalBackend, type ExternalBackendOptions, type StreamState, type StreamStep } from './external-backend';
import { postJson, postText } from './http-stream';
import { ServedAdapters } from './served-adapters';

/**
 * vLLM through its OpenAI-compatible server (`vllm serve`), tokens in and out.
 *
 * Generation: POST /v1/completions with `prompt` as a token-id array, `stream: true` and
 * `stream_options.include_usage` (the last event carries usage with
 * `prompt_tokens_details.cached_tokens`, filled when the server runs with
 * `--enable-prompt-tokens-details`). `logprobs: k` asks for k alternatives per token (`top_logprobs`, a {"token_id:<n>": logprob}
 * map per token; k = 0 for none, the usual case): vLLM always
 * includes the sampled token's own logprob ("the log probabilities of the specified number of
 * most likely tokens, as well as the chosen tokens" — SamplingParams.logprobs), so each event
 * carries `choices[0].logprobs.{tokens, token_logprobs}`; with `return_tokens_as_token_ids`
 * the tokens read "token_id:<n>", which keeps ids exact without a tokenizer (a detokenised
 * string would not round-trip). `skip_special_tokens: false` and
 * `include_stop_str_in_output: true` keep EOS/stop tokens in the output, as training needs.
 * Newer servers also send `choices[0].token_ids` (`return_token_ids`); ids are taken from
 * there when present.
 *
 * Logprob semantics: by default vLLM V1 returns logprobs of the RAW model distribution
 * (before temperature, top-k/top-p; Sampler docs: "If logprobs_mode is raw_logprobs, compute
 * logprobs as the final logprobs to return"). For the log-prob under the distribution the
 * token was actually sampled from, start the server with `--logprobs-mode processed_logprobs`.
 * At temperature 1 without top-k/top-p both agree.
 *
 * Constrained decoding: `structured_outputs: {grammar}` with the grammar as EBNF (toEbnf, the
 * same language the embedded engine enforces), compiled by vLLM's structured-output backend
 * (xgrammar by default). With `processed_logprobs` the logprobs include the grammar's mask (it is
 * applied to the logits before sampling). A constrained call cannot be resumed on vLLM (the
 * grammar would start over), see InferenceBackend.resumesConstraints.
 *
 * Abort: closing the HTTP connection aborts the request inside vLLM.
 *
 * Weight updates (from the checkpoint directory, no NCCL group needed), through the dev-mode
 * endpoints (`VLLM_SERVER_DEV_MODE=1`):
 *   POST /collective_rpc {"method":"update_config","args":[{"model_config":{"model":<dir>}}]}
 *   POST /collective_rpc {"method":"reload_weights"}
 *   POST /reset_prefix_cache           (cached KV was computed by the old weights)
 * `update_config` / `reload_weights` are the worker methods vLLM's own example
 * (examples/offline_inference/skip_loading_weights_in_engine_init.py) calls through
 * `collective_rpc`. The proxy drains or aborts this replica's generations itself before
 * calling them, so vLLM's /pause is not needed. Required server flags:
 *   VLLM_SERVER_DEV_MODE=1 vllm serve <model> --enable-prefix-caching \
 *     --logprobs-mode processed_logprobs --enable-prompt-tokens-details
 *
 * LoRA adapter versions (weights.published with weights 'lora-adapter'; see ServedAdapters): the
 * base is loaded as above, then POST /v1/load_lora_adapter {lora_name, lora_path} (plain text on
 * success) and completions name the adapter as their `model`; the previous version's adapter is
 * removed with POST /v1/unload_lora_adapter. vLLM applies it unmerged, with its own LoRA kernels.
 * Additional server flags: VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and
 * `--enable-lora --max-lora-rank <r> --max-loras 2` (the served adapter and the next one).
 */
export class VllmBackend extends ExternalBackend {
  readonly kind = 'vllm' as const;
  protected readonly streamPath = '/v1/completions';

  private readonly adapters: ServedAdapters;

  constructor(private readonly options: ExternalBackendOptions) {
    super(options);
    const opts = () => ({ timeoutMs: this.loadTimeoutMs });
    this.adapters = new ServedAdapters(this.id, {
      loadFull: (dir) => this.loadCheckpoint(dir),
      loadAdapter: async (name, path) =>
        void (await postText(this.id, `${this.baseUrl}/v1/load_lora_adapter`, { lora_name: name, lora_path: path }, opts())),
      unloadAdapter: async (name) => void (await postText(this.id, `${this.baseUrl}/v1/unload_lora_adapter`, { lora_name: name }, opts())),
    });
  }

  protected requestBody(req: BackendGenerateRequest, grammar: string | null): unknown {
    const s = req.sampling;
    return {
      // constrained decoding (vLLM >= 0.12: `structured_outputs`; the guided_* fields were removed)
      ...(grammar !== null ? { structured_outputs: { grammar } } : {}),
      // a LoRA adapter version is served under its adapter's name
      ...(this.adapters.current !== null ? { model: this.adapters.current } : this.options.model ? { model: this.options.model } : {}),
      prompt: req.promptIds,
      max_tokens: s.maxTokens,
      temperature: s.temperature,
      top_p: s.topP,
      ...(s.topK > 0 ? { top_k: s.topK } : {}),
      ...(s.seed !== null ? { seed: s.seed } : {}),
      stop_token_ids: s.stopIds,
      logprobs: s.topLogprobs ?? 0,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      include_stop_str_in_output: true,
      stream: true,
      stream_options: { include_usage: true },
    };
  }

  protected parseEvent(data: unknown, state: StreamState): StreamStep {
    const event = data as VllmCompletionChunk;
    const step: StreamStep = { ids: [], logprobs: [] };
    const cached = event.usage?.prompt_tokens_details?.cached_tokens;
    if (typeof cached === 'number') step.cachedPromptTokens = cached;
    const choice = event.choices?.[0];
    if (!choice) return step;
    const lp = choice.logprobs;
    const tokenLogprobs = lp?.token_logprobs ?? [];
    const ids = choice.token_ids ?? (lp?.tokens ?? []).map((t) => parseTokenId(this.id, t));
    if (ids.length !== tokenLogprobs.length) {
      throw new BackendUnavailableError(this.id, `completion chunk has ${ids.length} tokens but ${tokenLogprobs.length} logprobs`);
    }
    step.ids = ids;
    step.logprobs = tokenLogprobs.map((x) => (x === null ? Number.NEGATIVE_INFINITY : x));
    // With k = 0 vLLM still lists the sampled token in top_logprobs; nobody asked for it.
    if (state.wantTop && lp?.top_logprobs) step.topLogprobs = lp.top_logprobs.map((alts) => this.alternatives(alts));
    if (choice.finish_reason) step.finishReason = mapFinish(choice.finish_reason);
    return step;
  }

  /** One position's `top_logprobs` ({"token_id:<n>": logprob}, up to k or k + 1 with the sampled one), most likely first. */
  private alternatives(alts: Record<string, number | null> | null): { ids: number[]; logprobs: number[] } {
    const entries = Object.entries(alts ?? {})
      .map(([token, lp]) => [parseTokenId(this.id, token), lp === null ? Number.NEGATIVE_INFINITY : lp] as const)
      .sort((a, b) => b[1] - a[1]);
    return { ids: entries.map((e) => e[0]), logprobs: entries.map((e) => e[1]) };
  }

  health(): Promise<BackendHealth> {
    return this.getOk('/health');
  }

  loadWeights(req: LoadWeightsRequest): Promise<void> {
    return this.adapters.load(req);
  }

  private async loadCheckpoint(dir: string): Promise<void> {
    const opts = { timeoutMs: this.loadTimeoutMs };
    await postJson(this.id, `${this.baseUrl}/collective_rpc`, { method: 'update_config', args: [{ model_config: { model: dir } }] }, opts);
    await postJson(this.id, `${this.baseUrl}/collective_rpc`, { method: 'reload_weights' }, opts);
    await postJson(this.id, `${this.baseUrl}/reset_prefix_cache`, {}, { timeoutMs: this.controlTimeoutMs });
  }
}

interface VllmCompletionChunk {
  choices?: {
    index: number;
    text?: string;
    token_ids?: number[];
    logprobs?: { tokens?: string[]; token_logprobs?: (number | null)[]; top_logprobs?: (Record<string, number | null> | null)[] } | null;
    finish_reason?: string | null;
  }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
}

const TOKEN_ID_PREFIX = 'token_id:';

/** "token_id:<n>" -> n (a plain scan: this runs for every token, and a regex match allocates). */
function parseTokenId(backendId: string, token: string): number {
  if (!isTokenIdText(token))
    throw new BackendUnavailableError(
      backendId,
      `token ${JSON.stringify(token)} is not "token_id:<n>": is return_tokens_as_token_ids supported by this vLLM?`,
    );
  return Number(token.slice(TOKEN_ID_PREFIX.length));
}

/** Whether `token` matches /^token_id:\d+$/ (ASCII digits, at least one). */
function isTokenIdText(token: unknown): token is string {
  if (typeof token !== 'string' || token.length <= TOKEN_ID_PREFIX.length || !token.startsWith(TOKEN_ID_PREFIX)) return false;
  for (let i = TOKEN_ID_PREFIX.length; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}

function mapFinish(reason: string): FinishReason {
  // vLLM: "stop" (EOS, stop token or string), "length" (max_tokens / context), "abort".
  return reason === 'length' ? 'length' : reason === 'stop' ? 'stop' : 'abort';
}
