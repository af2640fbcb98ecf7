import {
  BackendRequestError,
  BackendUnavailableError,
  type BackendGenerateRequest,
  type BackendHealth,
  type FinishReason,
  type LoadWeightsRequest,
} from './backend';
import { ExternalBackend, type StreamState, type StreamStep } from './external-backend';
import { postJson } from './http-stream';
import { ServedAdapters } from './served-adapters';

/**
 * SGLang through its native runtime API (`python -m sglang.launch_server`).
 *
 * Generation: POST /generate with `input_ids`, `rid` (our attempt id, so we can abort it),
 * `sampling_params` {max_new_tokens, temperature, top_p, top_k (-1 = off), stop_token_ids,
 * skip_special_tokens: false, no_stop_trim: true (keep the stop token in the output),
 * sampling_seed}, `return_logprob: true`, `logprob_start_len: -1` (output tokens only), `top_logprobs_num: k` when
 * alternatives are asked for (then `meta_info.output_top_logprobs`: per token [logprob, id, text]
 * lists) and
 * `stream: true` (GenerateReqInput in io_struct.py; docs: basic_usage/sampling_params). Each
 * SSE `data:` event carries `meta_info.output_token_logprobs` as [logprob, token_id, text]
 * tuples plus `completion_tokens`, `cached_tokens` and `finish_reason` ({type: stop|length|abort}),
 * and the stream ends with `data: [DONE]`. By default the lists are CUMULATIVE (each event
 * repeats every token so far); servers started with `--incremental-streaming-output` send only
 * the new ones. We tell them apart by `completion_tokens`: when the list is as long as the
 * count of tokens generated so far it is cumulative and we take the part we have not seen.
 *
 * Logprob semantics: SGLang computes the returned logprob from the temperature-scaled
 * distribution (before top-k/top-p renormalisation); `SGLANG_RETURN_ORIGINAL_LOGPROB=1` makes
 * it return the raw model distribution instead. At temperature 1 without top-k/top-p all agree.
 *
 * Constrained decoding: `sampling_params.ebnf` with the grammar as EBNF (toEbnf); a constrained
 * call cannot be resumed here (see InferenceBackend.resumesConstraints).
 *
 * Abort: POST /abort_request {rid} (and the connection is closed: SGLang also aborts requests
 * whose client disconnected). Health: GET /health.
 * Weight updates: POST /update_weights_from_disk {model_path} loads the checkpoint in place
 * and flushes the radix cache; it answers {success, message}.
 *
 * LoRA adapter versions (weights.published with weights 'lora-adapter'; see ServedAdapters): the
 * base is loaded as above, then POST /load_lora_adapter {lora_name, lora_path} ({success,
 * error_message}) and /generate names the adapter in `lora_path`; the previous version's adapter
 * is removed with POST /unload_lora_adapter. SGLang applies it unmerged. Server flags:
 * `--enable-lora --max-lora-rank <r> --lora-target-modules <the trainer's targets>
 * --max-loras-per-batch 2`.
 */
export class SglangBackend extends ExternalBackend {
  readonly kind = 'sglang' as const;
  protected readonly streamPath = '/generate';
  private readonly adapters = new ServedAdapters(this.id, {
    loadFull: (dir) => this.loadCheckpoint(dir),
    loadAdapter: (name, path) => this.loraCall('/load_lora_adapter', { lora_name: name, lora_path: path }),
    unloadAdapter: (name) => this.loraCall('/unload_lora_adapter', { lora_name: name }),
  });

  protected requestBody(req: BackendGenerateRequest, grammar: string | null): unknown {
    const s = req.sampling;
    return {
      rid: req.requestId,
      input_ids: req.promptIds,
      sampling_params: {
        max_new_tokens: s.maxTokens,
        temperature: s.temperature,
        top_p: s.topP,
        top_k: s.topK > 0 ? s.topK : -1,
        stop_token_ids: s.stopIds,
        skip_special_tokens: false,
        no_stop_trim: true,
        ...(s.seed !== null ? { sampling_seed: s.seed } : {}),
        // constrained decoding: the grammar as EBNF (SGLang's grammar backend, xgrammar by default)
        ...(grammar !== null ? { ebnf: grammar } : {}),
      },
      // a LoRA adapter version: the adapter's name in SGLang's LoRA registry
      ...(this.adapters.current !== null ? { lora_path: this.adapters.current } : {}),
      return_logprob: true,
      logprob_start_len: -1,
      ...((s.topLogprobs ?? 0) > 0 ? { top_logprobs_num: s.topLogprobs } : {}),
      stream: true,
    };
  }

  protected parseEvent(data: unknown, state: StreamState): StreamStep {
    const event = data as SglangStreamEvent;
    const meta = event.meta_info ?? {};
    const tuples = meta.output_token_logprobs ?? [];
    const total = meta.completion_tokens;
    // Cumulative when the list covers every token generated so far.
    const cumulative = typeof total === 'number' ? tuples.length === total && total >= state.received : tuples.length >= state.received;
    const fresh = cumulative ? tuples.slice(state.received) : tuples;
    const step: StreamStep = { ids: fresh.map((t) => t[1]), logprobs: fresh.map((t) => (t[0] === null ? Number.NEGATIVE_INFINITY : t[0])) };
    // output_top_logprobs (with top_logprobs_num): per token a list of [logprob, id, text], cumulative or not like the tokens.
    const top = meta.output_top_logprobs;
    if (top && state.wantTop) {
      const freshTop = cumulative ? top.slice(state.received) : top;
      step.topLogprobs = freshTop.map((alts) => {
        const sorted = [...(alts ?? [])]
          .map((a) => [a[1], a[0] === null ? Number.NEGATIVE_INFINITY : a[0]] as const)
          .sort((a, b) => b[1] - a[1]);
        return { ids: sorted.map((a) => a[0]), logprobs: sorted.map((a) => a[1]) };
      });
    }
    if (typeof meta.cached_tokens === 'number') step.cachedPromptTokens = meta.cached_tokens;
    if (meta.finish_reason) step.finishReason = mapFinish(meta.finish_reason);
    if (step.finishReason === undefined && tuples.length === 0 && event.error) {
      throw new BackendUnavailableError(this.id, `stream error: ${JSON.stringify(event.error)}`);
    }
    return step;
  }

  protected override async onAbort(requestId: string): Promise<void> {
    await postJson(this.id, `${this.baseUrl}/abort_request`, { rid: requestId }, { timeoutMs: this.controlTimeoutMs });
  }

  health(): Promise<BackendHealth> {
    return this.getOk('/health');
  }

  loadWeights(req: LoadWeightsRequest): Promise<void> {
    return this.adapters.load(req);
  }

  /** SGLang's LoRA endpoints answer {success, error_message}, with 400 on failure. */
  private async loraCall(path: string, body: unknown): Promise<void> {
    const res = (await postJson(this.id, `${this.baseUrl}${path}`, body, { timeoutMs: this.loadTimeoutMs })) as {
      success?: boolean;
      error_message?: string | null;
    } | null;
    if (!res?.success) throw new BackendRequestError(this.id, 400, `${path} failed: ${res?.error_message ?? 'no answer'}`);
  }

  private async loadCheckpoint(dir: string): Promise<void> {
    const res = (await postJson(
      this.id,
      `${this.baseUrl}/update_weights_from_disk`,
      { model_path: dir },
      { timeoutMs: this.loadTimeoutMs },
    )) as {
      success?: boolean;
      message?: string;
    } | null;
    if (!res?.success) throw new BackendUnavailableError(this.id, `update_weights_from_disk failed: ${res?.message ?? 'no answer'}`);
  }
}

interface SglangStreamEvent {
  text?: string;
  output_ids?: number[];
  error?: unknown;
  meta_info?: {
    id?: string;
    finish_reason?: { type: string; message?: string } | null;
    prompt_tokens?: number;
    completion_tokens?: number;
    cached_tokens?: number;
    output_token_logprobs?: [number | null, number, string | null][];
    output_top_logprobs?: ([number | null, number, string | null][] | null)[];
  };
}

function mapFinish(reason: { type: string }): FinishReason {
  return reason.type === 'length' ? 'length' : reason.type === 'stop' ? 'stop' : 'abort';
}
