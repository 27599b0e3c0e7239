/**
 * The one error type of this library: an invalid event or option, or a client it cannot use.
 * Database errors from the driver are passed through unchanged.
 */
export class OutboxError extends Error {
  /** The event field at fault (e.g. `roomId`), when the error is about one. */
  readonly field: string | undefined;
  /** Position of the event at fault in the batch (0 for a single {@link enqueue}). */
  readonly eventIndex: number | undefined;

  constructor(message: string, options: { field?: string; eventIndex?: number } = {}) {
    super(message);
    this.name = 'OutboxError';
    this.field = options.field;
    this.eventIndex = options.eventIndex;
  }
}
