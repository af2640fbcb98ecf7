export * from './api-error';
export * from './openai-error.filter';
