import { randomBytes } from 'node:crypto';

import { OutboxError } from './errors.js';

const U64_MAX = 2n ** 64n - 1n;

/**
 * Makes time-ordered event ids: `evt_` + the milliseconds as 13 lowercase hex digits + 16
 * lowercase hex digits, random for the first id of a millisecond and one more than the last for
 * the next ids of the same millisecond, so the ids one generator makes in one millisecond sort
 * in the order they were made (like the host's `new_event_id`).
 *
 * Most code uses {@link newEventId} (one generator per process); a generator of its own keeps a
 * sequence independent of the rest of the process.
 */
export class EventIdGenerator {
  #lastMs = -1n;
  #lastTail = 0n;

  /**
   * A new id for the UTC millisecond `ms` (default: now). Negative milliseconds count as 0.
   *
   * @throws {@link OutboxError} when `ms` is not an integer number or a bigint.
   */
  next(ms: number | bigint = Date.now()): string {
    let now = toMillis(ms);
    if (now < 0n) now = 0n;
    let tail: bigint;
    if (now === this.#lastMs && this.#lastTail < U64_MAX) {
      tail = this.#lastTail + 1n;
    } else {
      tail = randomBytes(8).readBigUInt64BE();
    }
    this.#lastMs = now;
    this.#lastTail = tail;
    return `evt_${now.toString(16).padStart(13, '0')}${tail.toString(16).padStart(16, '0')}`;
  }
}

function toMillis(ms: number | bigint): bigint {
  if (typeof ms === 'bigint') return ms;
  if (typeof ms === 'number' && Number.isFinite(ms)) return BigInt(Math.trunc(ms));
  throw new OutboxError(`newEventId: milliseconds must be a finite number or a bigint, got ${String(ms)}`);
}

const processGenerator = new EventIdGenerator();

/**
 * A new time-ordered event id for the UTC millisecond `ms` (default: now), from the process-wide
 * {@link EventIdGenerator}: ids made in one millisecond sort in the order they were made.
 *
 * @example
 * ```ts
 * newEventId(1_700_000_000_000); // 'evt_0018bcfe56800' + 16 hex digits
 * ```
 */
export function newEventId(ms?: number | bigint): string {
  return processGenerator.next(ms);
}
