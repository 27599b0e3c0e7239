/**
 * The W3C Trace Context an event carries (envelope fields 8 `traceparent` and 9 `tracestate`): the
 * checks every producer library shares (producers/SPEC.md, "Trace context";
 * producers/golden/envelopes.json, `traceparent_checks`), and the current span's context, taken
 * from `@opentelemetry/api` when the application has it. That package is an optional peer
 * dependency: it is loaded the first time a trace context is asked for, once, and its absence
 * only means that nothing is captured.
 */

import { createRequire } from 'node:module';

/** A span's W3C Trace Context as header values. */
export interface TraceContext {
  /** The `traceparent` header value, e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`. */
  traceparent: string;
  /** The `tracestate` header value that goes with it; empty when none. */
  tracestate: string;
}

/** The longest `tracestate` accepted, in characters (W3C Trace Context: 512). */
export const TRACESTATE_MAX = 512;

/**
 * The longest `traceparent` accepted, in characters (Unicode scalar values): a later version may go
 * on after a further `-`, to this many in all (producers/SPEC.md, "Trace context").
 */
export const TRACEPARENT_MAX = 256;

/** The length of a version `00` traceparent; a later version may go on after a further `-`. */
const TRACEPARENT_CHARS = 55;
/** version-traceid-parentid-flags, in lowercase hex. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
/** A `tracestate` list member longer than this is the first to go when the header is cut to fit. */
const LONG_MEMBER_CHARS = 128;

/**
 * Why `value` is not a W3C `traceparent` (a phrase for an error message), or `undefined` when it
 * is one: version (2 lowercase hex digits, not `ff`), trace id (32, not all zeros), parent id (16,
 * not all zeros) and flags (2), joined by `-`; version `00` is exactly 55 characters, a later
 * version may go on after a further `-`, to at most 256 characters in all.
 */
export function traceparentProblem(value: string): string | undefined {
  const parts = TRACEPARENT.exec(value.slice(0, TRACEPARENT_CHARS));
  if (parts === null) return "is not version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits joined by '-'";
  const [, version, traceId, parentId] = parts;
  if (version === 'ff') return 'version ff is invalid';
  if (/^0+$/.test(traceId!)) return 'the trace id is all zeros';
  if (/^0+$/.test(parentId!)) return 'the parent id is all zeros';
  if (value.length > TRACEPARENT_CHARS) {
    if (version === '00') return `version 00 is exactly ${TRACEPARENT_CHARS} characters, this is ${value.length}`;
    if (value[TRACEPARENT_CHARS] !== '-') return "a later version goes on after the flags only behind a '-'";
    // Unicode scalar values, as the host counts them (never more than UTF-16 code units).
    if (value.length > TRACEPARENT_MAX) {
      let chars = 0;
      for (const _ of value) chars++;
      if (chars > TRACEPARENT_MAX) return `a later version is at most ${TRACEPARENT_MAX} characters, this is ${chars}`;
    }
  }
  return undefined;
}

/**
 * Why `value` cannot be a `tracestate` (at most 512 characters of printable ASCII, 0x20–0x7e), or
 * `undefined` when it can.
 */
export function tracestateProblem(value: string): string | undefined {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 0x20 || code > 0x7e) {
      return `has ${JSON.stringify(String.fromCodePoint(value.codePointAt(i)!))} at ${i}, only printable ASCII (0x20-0x7e) is allowed`;
    }
  }
  if (value.length > TRACESTATE_MAX) return `is ${value.length} characters, at most ${TRACESTATE_MAX} fit`;
  return undefined;
}

/**
 * The trace context of OpenTelemetry's active span (`trace.getActiveSpan()?.spanContext()`), or
 * `undefined` when `@opentelemetry/api` is not installed, or no span with a valid context is
 * active.
 *
 * `traceparent` is `00-<trace id>-<span id>-<flags>` in lowercase hex; `tracestate` is the span's
 * trace state serialized, cut to 512 characters by whole list members as W3C Trace Context says
 * (members over 128 characters first, then from the end), empty when none. {@link enqueue} and
 * friends fill an event's trace context from this when the event has no `traceparent` of its own
 * ({@link toRow} does not: with a driver of your own, set the event's fields from this).
 *
 * @throws what loading `@opentelemetry/api` throws, but for "module not found".
 */
export function currentTraceContext(): TraceContext | undefined {
  const api = openTelemetry();
  if (api === null) return undefined;
  const context = api.trace.getActiveSpan()?.spanContext();
  if (context === undefined || !api.isSpanContextValid(context)) return undefined;
  const flags = (Number(context.traceFlags) & 0xff).toString(16).padStart(2, '0');
  const traceparent = `00-${context.traceId.toLowerCase()}-${context.spanId.toLowerCase()}-${flags}`;
  // Never fails: isSpanContextValid checked the ids (only case aside, made lowercase above).
  if (traceparentProblem(traceparent) !== undefined) return undefined;
  return { traceparent, tracestate: fitTracestate(context.traceState?.serialize() ?? '') };
}

/**
 * `header` (a serialized `tracestate`) cut to at most 512 characters by dropping whole list
 * members: those over 128 characters first, last first, then from the end. `''` when what is left
 * is not printable ASCII (an event must not fail for its span's trace state).
 */
export function fitTracestate(header: string): string {
  let fitted = header;
  if (fitted.length > TRACESTATE_MAX) {
    const members = fitted
      .split(',')
      .map((member) => member.trim())
      .filter((member) => member !== '');
    while (members.join(',').length > TRACESTATE_MAX) {
      const long = members.findLastIndex((member) => member.length > LONG_MEMBER_CHARS);
      members.splice(long === -1 ? members.length - 1 : long, 1);
    }
    fitted = members.join(',');
  }
  return tracestateProblem(fitted) === undefined ? fitted : '';
}

/** What this library uses of `@opentelemetry/api` (its own types are not a dependency). */
interface OpenTelemetryApi {
  trace: { getActiveSpan(): { spanContext(): SpanContext } | undefined };
  isSpanContextValid(context: SpanContext): boolean;
}

interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: { serialize(): string };
}

/** `@opentelemetry/api`; `null` when it is not installed; `undefined` before the first try. */
let loaded: OpenTelemetryApi | null | undefined;

/**
 * `@opentelemetry/api` as the application has it, loaded on the first call only (synchronously, so
 * that the sync API captures too; its CommonJS and ESM builds share one global registry, so the
 * context manager and tracer provider the application set up are the ones seen here).
 */
function openTelemetry(): OpenTelemetryApi | null {
  if (loaded === undefined) {
    let api: Partial<OpenTelemetryApi> | undefined;
    try {
      api = createRequire(import.meta.url)('@opentelemetry/api') as Partial<OpenTelemetryApi>;
    } catch (error) {
      if (!isModuleNotFound(error)) throw error;
    }
    // Before 1.2 the API had no trace.getActiveSpan(): treated as absent.
    loaded =
      typeof api?.trace?.getActiveSpan === 'function' && typeof api.isSpanContextValid === 'function'
        ? (api as OpenTelemetryApi)
        : null;
  }
  return loaded;
}

/** Whether `error` says that `@opentelemetry/api` itself cannot be found. */
function isModuleNotFound(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return code === 'MODULE_NOT_FOUND' && typeof message === 'string' && message.includes("'@opentelemetry/api'");
}
