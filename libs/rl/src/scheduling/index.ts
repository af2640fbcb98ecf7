export * from './errors';
export * from './adaptive';
export * from './windowed-fifo';
