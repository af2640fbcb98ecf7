import type { GrammarNode } from './grammar';
import type { JsonSchema } from './nfa/json-schema';

/** A tool as offered (OpenAI `function`): its name and the JSON Schema of its arguments. */
export interface ToolSpec {
  name: string;
  /** Absent: the tool takes no arguments (`{}`), as OpenAI reads an omitted `parameters`. */
  parameters?: JsonSchema | null;
}

/**
 * How a model family's chat template writes a tool call around the name and the arguments,
 * found by rendering a probe call with the template (libs/tokenizer `toolCallFrame`). Hermes:
 * `<tool_call>\n{"name": "` NAME `", "arguments": ` ARGS `}\n</tool_call>` then end of turn.
 */
export interface ToolCallFrame {
  /** Text between the name and the arguments object. */
  afterName: string;
  /** Text after the arguments object, up to the end-of-turn token. */
  afterArguments: string;
}

const NO_ARGUMENTS: JsonSchema = { type: 'object', properties: {} };

/**
 * The rest of a forced tool call once its opening is in the prompt (the opening up to the name
 * for `tool_choice: "required"`, through the name for a named tool): one of the offered names
 * (`named` null) or nothing, then the frame's text around arguments valid against that tool's
 * schema. The stop ids (the end of turn) follow it.
 */
export function toolCallGrammar(tools: readonly ToolSpec[], frame: ToolCallFrame, named: string | null): GrammarNode {
  const call = (t: ToolSpec, withName: boolean): GrammarNode => ({
    seq: [{ text: (withName ? t.name : '') + frame.afterName }, { json: t.parameters ?? NO_ARGUMENTS }, { text: frame.afterArguments }],
  });
  if (named !== null) {
    const tool = tools.find((t) => t.name === named);
    if (!tool) throw new Error(`tool ${JSON.stringify(named)} is not among the tools`);
    return call(tool, false);
  }
  if (tools.length === 0) throw new Error('a forced tool call needs at least one tool');
  return tools.length === 1 ? call(tools[0], true) : { oneOf: tools.map((t) => call(t, true)) };
}
