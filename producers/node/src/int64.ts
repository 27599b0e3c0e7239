/** Smallest int64. */
export const INT64_MIN = -(2n ** 63n);
/** Largest int64. */
export const INT64_MAX = 2n ** 63n - 1n;

/**
 * `value` as an int64 bigint, or a reason why it is not one: a bigint in the int64 range or a
 * number that is a safe integer (larger numbers have already lost digits: pass a bigint).
 */
export function toInt64(value: unknown): bigint | string {
  if (typeof value === 'bigint') {
    return value >= INT64_MIN && value <= INT64_MAX ? value : `${value} is outside the int64 range`;
  }
  if (typeof value === 'number') {
    if (Number.isSafeInteger(value)) return BigInt(value);
    if (Number.isInteger(value)) {
      return `${value} is beyond Number.MAX_SAFE_INTEGER and may have lost precision: pass a bigint`;
    }
    return `${value} is not an integer`;
  }
  return `expected a bigint or an integer number, got ${describe(value)}`;
}

/** A short description of a value's type, for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Date) return 'a Date';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'Object'})`;
  return typeof value;
}
