/**
 * Why a message could not become a typed event. The reason travels into the dead-letter
 * topic's headers, so it is a short machine-readable code plus a human message.
 */
export type ContractErrorReason = 'malformed_frame' | 'oversized' | 'unknown_type' | 'unknown_version' | 'invalid_payload';

export class ContractError extends Error {
  constructor(
    readonly reason: ContractErrorReason,
    message: string,
  ) {
    super(`${reason}: ${message}`);
    this.name = 'ContractError';
  }
}
