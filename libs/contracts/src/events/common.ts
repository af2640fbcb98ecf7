import { z } from 'zod';

export const id = () => z.string().min(1).max(128);
export const timestampMs = () => z.number().int().nonnegative();
export const policyVersion = () => z.number().int().nonnegative();
