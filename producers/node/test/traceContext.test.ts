// The trace context of OpenTelemetry's active span, taken by the enqueue functions when an event
// has none of its own: real spans of the SDK's tracer, made active by the AsyncLocalStorage context
// manager as an application sets them up; and the library where @opentelemetry/api is not installed.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';

import { context, createTraceState, ROOT_CONTEXT, type Span, type SpanContext, trace, TraceFlags, type TraceState } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import Database from 'better-sqlite3';

import {
  currentTraceContext,
  enqueue,
  enqueueBatch,
  enqueueBatchSync,
  enqueueSync,
  type Event,
  OutboxError,
  toRow,
  TRACESTATE_MAX,
} from '@outboxd/producer';

import { REPO_ROOT } from './helpers.js';

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = new BasicTracerProvider().getTracer('outboxd-producer-test');

const TRACESTATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
const EXPLICIT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';

/** A remote parent (as an incoming request's traceparent would give), sampled unless told. */
function remoteParent(traceFlags = TraceFlags.SAMPLED, traceState: TraceState | undefined = createTraceState(TRACESTATE)) {
  const parent: SpanContext = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags, isRemote: true };
  if (traceState !== undefined) parent.traceState = traceState;
  return trace.setSpanContext(ROOT_CONTEXT, parent);
}

/** Runs `fn` with a new span of the SDK's tracer active (a child of `parent`), then ends the span. */
function inSpan<T>(fn: (span: Span) => T, parent = ROOT_CONTEXT): T {
  return tracer.startActiveSpan('enqueue gift', {}, parent, (span) => {
    const result = fn(span);
    if (result instanceof Promise) return result.finally(() => span.end()) as T;
    span.end();
    return result;
  });
}

/** The traceparent of `span`, as it must be written. */
function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
}

function open() {
  const db = new Database(':memory:');
  const migration = readFileSync(join(REPO_ROOT, 'migrations', 'sqlite', '0001_room_outbox.sql'), 'utf8');
  db.exec(migration.replaceAll('{{table}}', 'room_outbox'));
  return db;
}

/** Every row's envelope, by event id. */
function envelopes(db: Database.Database): Map<string, Buffer> {
  const rows = db.prepare('SELECT event_id, envelope FROM room_outbox').all() as { event_id: string; envelope: Buffer }[];
  return new Map(rows.map((row) => [row.event_id, row.envelope]));
}

const gift = (id: string, extra: Partial<Event> = {}): Event => ({
  eventId: id,
  eventType: 'RoomGiftSent',
  roomId: 'room-42',
  roomVersion: 7n,
  occurredAt: 1_700_000_000_000,
  body: Buffer.from('{"gift":"rose"}'),
  ...extra,
});

/** The envelope of `event` carrying `traceparent` / `tracestate`. */
const envelopeWith = (event: Event, traceparent: string, tracestate = '') => toRow({ ...event, traceparent, tracestate }).envelope;

test('no active span: no trace context', async () => {
  assert.equal(trace.getActiveSpan(), undefined);
  assert.equal(currentTraceContext(), undefined);
  // A span that has ended and is no longer active leaves nothing behind.
  inSpan(() => undefined);
  assert.equal(currentTraceContext(), undefined);
  // Nor does a span context that is not valid.
  const invalid = trace.setSpanContext(ROOT_CONTEXT, { traceId: '0'.repeat(32), spanId: '0'.repeat(16), traceFlags: TraceFlags.SAMPLED });
  context.with(invalid, () => assert.equal(currentTraceContext(), undefined));

  const db = open();
  const event = gift('untraced');
  assert.equal(await enqueue(db, event), true);
  assert.equal(enqueueSync(db, gift('untraced-sync')), true);
  const stored = envelopes(db);
  assert.deepEqual(stored.get('untraced'), toRow(event).envelope);
  assert.equal(toRow(event).traceparent, '');
  assert.deepEqual(stored.get('untraced-sync'), toRow(gift('untraced-sync')).envelope);
  db.close();
});

test('the active span of the SDK tracer: its ids and flags, and the trace state it inherits', () => {
  inSpan((span) => {
    assert.deepEqual(currentTraceContext(), { traceparent: traceparentOf(span), tracestate: '' });
    assert.match(traceparentOf(span), /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  });
  inSpan((span) => {
    const captured = currentTraceContext()!;
    assert.equal(captured.traceparent, `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.spanContext().spanId}-01`);
    assert.notEqual(span.spanContext().spanId, '00f067aa0ba902b7');
    assert.equal(captured.tracestate, TRACESTATE);
  }, remoteParent());
  // A parent that was not sampled: neither is the child, and its flags say so.
  inSpan((span) => {
    assert.equal(currentTraceContext()!.traceparent, `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.spanContext().spanId}-00`);
  }, remoteParent(TraceFlags.NONE, undefined));
  // A span context made active without a tracer (e.g. by a propagator) counts too.
  const parent = remoteParent();
  context.with(parent, () => {
    assert.deepEqual(currentTraceContext(), { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: TRACESTATE });
  });
});

test('enqueue and enqueueBatch take the active span across awaits; explicit values win', async () => {
  const db = open();
  const events = {
    single: gift('single'),
    batched: gift('batched'),
    explicit: gift('explicit', { traceparent: EXPLICIT, tracestate: 'mine=1' }),
    explicitWithoutState: gift('explicit-without-state', { traceparent: EXPLICIT }),
    emptyIsNone: gift('empty-is-none', { traceparent: '', tracestate: '' }),
  };
  const span = await inSpan(async (span) => {
    await sleep(1);
    assert.equal(await enqueue(db, events.single), true);
    await sleep(1);
    assert.equal(await enqueueBatch(db, [events.batched, events.explicit, events.explicitWithoutState, events.emptyIsNone]), 4);
    return span;
  }, remoteParent());
  const traceparent = traceparentOf(span);
  assert.match(traceparent, /^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
  const stored = envelopes(db);
  assert.deepEqual(stored.get('single'), envelopeWith(events.single, traceparent, TRACESTATE));
  assert.deepEqual(stored.get('batched'), envelopeWith(events.batched, traceparent, TRACESTATE));
  assert.deepEqual(stored.get('explicit'), envelopeWith(events.explicit, EXPLICIT, 'mine=1'));
  // An explicit traceparent is the whole trace context: the span's trace state is not added to it.
  assert.deepEqual(stored.get('explicit-without-state'), envelopeWith(events.explicitWithoutState, EXPLICIT));
  assert.deepEqual(stored.get('empty-is-none'), envelopeWith(events.emptyIsNone, traceparent, TRACESTATE));
  // The caller's events are not changed.
  assert.equal(events.single.traceparent, undefined);
  assert.equal(events.emptyIsNone.traceparent, '');
  db.close();
});

test('enqueueSync and enqueueBatchSync inside db.transaction take the active span', () => {
  const db = open();
  const write = db.transaction((events: Event[]) => {
    assert.equal(enqueueSync(db, events[0]!), true);
    return enqueueBatchSync(db, events.slice(1));
  });
  const events = [gift('sync-1'), gift('sync-2'), gift('sync-3', { traceparent: EXPLICIT })];
  const span = inSpan((span) => {
    assert.equal(write(events), 2);
    return span;
  });
  const stored = envelopes(db);
  assert.deepEqual(stored.get('sync-1'), envelopeWith(events[0]!, traceparentOf(span)));
  assert.deepEqual(stored.get('sync-2'), envelopeWith(events[1]!, traceparentOf(span)));
  assert.deepEqual(stored.get('sync-3'), envelopeWith(events[2]!, EXPLICIT));
  db.close();
});

test('a tracestate without a traceparent is refused, even with a span active; nothing is written', async () => {
  const db = open();
  await inSpan(async () => {
    await assert.rejects(
      enqueueBatch(db, [gift('fine'), gift('state-only', { tracestate: 'rojo=1' })]),
      (error: unknown) => {
        assert.ok(error instanceof OutboxError, `${error}`);
        assert.equal(error.field, 'tracestate');
        assert.equal(error.eventIndex, 1);
        assert.equal(error.message, 'event #1 (eventId "state-only"): tracestate is given without a traceparent');
        return true;
      },
    );
    // An invalid explicit traceparent is refused, not replaced by the span's.
    assert.throws(() => enqueueSync(db, gift('bad', { traceparent: EXPLICIT.toUpperCase() })), /traceparent ".*" is not a W3C traceparent/);
  }, remoteParent());
  assert.equal(envelopes(db).size, 0);
  db.close();
});

test("a span's trace state longer than 512 characters is cut by whole members, long ones first", () => {
  // Members in the order they serialize: set() puts a new key first.
  const members = [
    `long1=${'l'.repeat(140)}`,
    ...Array.from({ length: 8 }, (_, i) => `k${i}=${String(i).repeat(45)}`),
    `long2=${'m'.repeat(130)}`,
    ...Array.from({ length: 3 }, (_, i) => `t${i}=${'t'.repeat(40)}`),
  ];
  let state = createTraceState();
  for (const member of [...members].reverse()) {
    const [key, value] = member.split('=') as [string, string];
    state = state.set(key, value);
  }
  assert.equal(state.serialize(), members.join(','));
  assert.ok(state.serialize().length > TRACESTATE_MAX);

  // Both long members go (the last one first); then the last members, until 512 fit.
  const kept = members.filter((member) => !member.startsWith('long'));
  while (kept.join(',').length > TRACESTATE_MAX) kept.pop();
  assert.ok(kept.length >= 8, `${kept.length} members kept`);
  context.with(trace.setSpanContext(ROOT_CONTEXT, { ...trace.getSpanContext(remoteParent())!, traceState: state }), () => {
    const captured = currentTraceContext()!;
    assert.equal(captured.tracestate, kept.join(','));
    assert.ok(captured.tracestate.length <= TRACESTATE_MAX);
    toRow(gift('cut', captured)); // what is taken is always accepted
  });
  // One long member over 512 characters alone: nothing is left of it.
  context.with(
    trace.setSpanContext(ROOT_CONTEXT, { ...trace.getSpanContext(remoteParent())!, traceState: createTraceState().set('big', 'x'.repeat(600)) }),
    () => assert.equal(currentTraceContext()!.tracestate, ''),
  );
});

test('without @opentelemetry/api installed nothing is captured and nothing fails', (t) => {
  // The built package alone in a node_modules of its own, where @opentelemetry/api cannot be found.
  const dir = mkdtempSync(join(tmpdir(), 'outboxd-node-no-otel-'));
  try {
    const pkg = join(dir, 'node_modules', '@outboxd', 'producer');
    mkdirSync(pkg, { recursive: true });
    cpSync(join(REPO_ROOT, 'producers', 'node', 'package.json'), join(pkg, 'package.json'));
    cpSync(join(REPO_ROOT, 'producers', 'node', 'dist'), join(pkg, 'dist'), { recursive: true });
    const script = `
      import { createRequire } from 'node:module';
      import { currentTraceContext, enqueueSync, toRow } from '@outboxd/producer';
      try {
        createRequire(import.meta.resolve('@outboxd/producer')).resolve('@opentelemetry/api');
        console.log(JSON.stringify({ resolvable: true }));
        process.exit(0);
      } catch {}
      const params = [];
      const db = { pragma() {}, prepare: () => ({ run: (...p) => (params.push(...p), { changes: 1 }) }) };
      const event = { eventId: 'e-1', eventType: 'RoomGiftSent', roomId: 'room-42', roomVersion: 7, occurredAt: 0 };
      const inserted = enqueueSync(db, event);
      const envelope = params.find((p) => p instanceof Uint8Array);
      console.log(JSON.stringify({
        current: currentTraceContext() ?? null,
        inserted,
        same: Buffer.from(envelope).equals(toRow(event).envelope),
        traced: toRow({ ...event, traceparent: '${EXPLICIT}' }).traceparent,
      }));
    `;
    const env = { ...process.env };
    delete env.NODE_PATH;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: dir, env, encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    const result = JSON.parse(run.stdout) as Record<string, unknown>;
    if (result.resolvable) {
      t.skip('@opentelemetry/api is resolvable from outside this package here (a global install?)');
      return;
    }
    assert.deepEqual(result, { current: null, inserted: true, same: true, traced: EXPLICIT });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
