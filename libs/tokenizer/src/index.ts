export * from './types';
export { BYTE_TO_CHAR, CHAR_TO_BYTE, byteLevelTokenBytes } from './byte-level';
export { HfTokenizer, loadHfTokenizer, loadHfTokenizerFromDir, readHfTokenizerFiles, type HfTokenizerFiles } from './hf-tokenizer';
export { ByteTokenizer, BYTE_VOCAB_SIZE, BYTE_ADDED_TOKENS } from './byte-tokenizer';
export { StreamDecoder } from './stream-decoder';
export {
  ChatTemplate,
  ChatTemplateError,
  contentText,
  messageReasoning,
  type ChatTemplateOptions,
  type RenderOptions,
} from './chat-template';
export { TINY_CHAT_TEMPLATE } from './tiny-template';
export * from './tool-calls';
export { renderToolsAsText, toolsSystemText, toolCallText, TOOLS_PREAMBLE, TOOLS_INSTRUCTION } from './tool-prompt';
export { forcedToolCallOpening, toolCallFrame, type ToolCallTemplateFrame } from './forced-tool-call';
export * from './continuation';
export * from './chat-format';
