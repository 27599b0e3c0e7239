// The end-to-end scenario of producers/SPEC.md, shared by the three databases: the library writes
// events with a business row in one transaction (a rolled-back one writes neither, duplicates
// count 0), then the real host delivers them through the real webhook plugin to an HTTP server
// here, and every field received equals what was written, and each event's W3C trace context (its
// own, or the OpenTelemetry span's it was written in) arrives as the headers traceparent and
// tracestate (none for an event without one).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';

import { context, createTraceState, ROOT_CONTEXT, type Span, type SpanContext, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';

import { build, encodeEnvelope, type Event, toRow } from '@outboxd/producer';

import { IN_CI, REPO_ROOT } from './helpers.js';

export const OUTBOXD_BIN = process.env.OUTBOXD_BIN || join(REPO_ROOT, 'target', 'debug', 'outboxd');
export const WEBHOOK_WASM = join(REPO_ROOT, 'plugins', 'out', 'webhook.wasm');
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const APP_CODES = ['default', 'live'];

// Spans as an application makes them: the SDK's tracer, made active by the AsyncLocalStorage
// context manager (each test file runs in a process of its own).
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = new BasicTracerProvider().getTracer('outboxd-producer-e2e');
/** The trace state of the remote parent of the test's sampled span (W3C Trace Context's example). */
const SPAN_TRACESTATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';

/** One row as read back: every column, integers and bytes as text. */
export interface StoredRow {
  app_code: string;
  event_id: string;
  event_type: string;
  room_id: string;
  status: string;
  envelope: Buffer;
  created_at_ms: string;
  retry_count: string;
  last_error: string | null;
  worker_id: string;
  lock_until_ms: string | null;
  next_retry_at_ms: string;
  updated_at_ms: string;
}

/** What a database-specific test gives the scenario. */
export interface Target {
  /** The host's `[database] url`. */
  url: string;
  /** Creates the business table (`gifts (id, note)`); the outbox table is made by `outboxd migrate`. */
  createBusinessTable(): Promise<void>;
  /** Runs `fn` in a transaction on the library's connection; commits, or rolls back when `commit` is false. */
  transaction<T>(commit: boolean, fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Every outbox row. */
  outboxRows(): Promise<StoredRow[]>;
  /** Every business row id. */
  businessIds(): Promise<string[]>;
  /** Lets go of the database while the host runs (SQLite), and takes it back. */
  release?(): Promise<void>;
  reacquire?(): Promise<void>;
}

/** What can be done inside one transaction. */
export interface Tx {
  business(id: string): Promise<void>;
  enqueue(event: Event): Promise<boolean>;
  enqueueBatch(events: Event[]): Promise<number>;
}

/**
 * Skips the test (loudly) or, under CI, fails it when something it needs is missing.
 * Returns true when the test should go on.
 */
export function need(t: TestContext, missing: string | undefined): boolean {
  if (missing === undefined) return true;
  if (IN_CI) assert.fail(`CI is set and ${missing}`);
  const line = '!'.repeat(100);
  console.error(`\n${line}\n!! SKIPPED ${t.name}: ${missing}\n!! (set CI=1 to make this a failure)\n${line}\n`);
  t.skip(missing);
  return false;
}

/** Why the host cannot run here, if it cannot. */
export function hostMissing(): string | undefined {
  if (!existsSync(OUTBOXD_BIN)) return `the host binary ${OUTBOXD_BIN} is missing (make build, or set OUTBOXD_BIN)`;
  if (!existsSync(WEBHOOK_WASM)) return `the webhook plugin ${WEBHOOK_WASM} is missing (make build)`;
  return undefined;
}

/** A short random name suffix for databases of one test. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${Math.random().toString(16).slice(2, 10)}`;
}

/** The host's config file for `url`, delivering to the webhook on `port`; returns its path. */
export function writeConfig(dir: string, url: string, port: number): string {
  const path = join(dir, 'outboxd.toml');
  const hook = `http://127.0.0.1:${port}`;
  writeFileSync(
    path,
    [
      '[database]',
      `url = ${JSON.stringify(url)}`,
      '[worker]',
      `app_codes = ${JSON.stringify(APP_CODES)}`,
      'poll_interval = "100ms"',
      '[[route]]',
      'event_type = "*"',
      'sink = "hook"',
      '[[sink]]',
      'name = "hook"',
      `plugin = ${JSON.stringify(WEBHOOK_WASM)}`,
      `config = { url = "${hook}/hook", secret = "${SECRET}", content_type = "json" }`,
      `limits = { allow_hosts = ["${hook}"], allow_private_addresses = true }`,
      '',
    ].join('\n'),
  );
  return path;
}

/** Runs `outboxd --config <config> <args>`; resolves with its output, rejects on a non-zero exit. */
export function outboxd(config: string, args: string[], timeoutMs = 120_000): Promise<string> {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('OUTBOXD_')) env[key] = value;
  }
  env.OUTBOXD_ADMIN_LISTEN = '';
  return new Promise((resolve, reject) => {
    const child = spawn(OUTBOXD_BIN, ['--config', config, ...args], { env, cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`outboxd ${args.join(' ')} exited with ${code ?? signal}:\n${output}`));
    });
  });
}

/** The trace context headers of one request: every value of each; absent: not sent. */
interface TraceHeaders {
  traceparent?: string[];
  tracestate?: string[];
}

/** One request the webhook sent. */
interface Delivery {
  headers: Record<string, string | string[] | undefined>;
  /** Its `traceparent` and `tracestate` headers, each line of them (not joined as `headers` does). */
  trace: TraceHeaders;
  text: string;
}

async function startReceiver(): Promise<{ server: Server; port: number; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/hook') {
        const traceHeaders: TraceHeaders = {};
        if (req.headersDistinct.traceparent !== undefined) traceHeaders.traceparent = req.headersDistinct.traceparent;
        if (req.headersDistinct.tracestate !== undefined) traceHeaders.tracestate = req.headersDistinct.tracestate;
        deliveries.push({ headers: req.headers, trace: traceHeaders, text: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      } else {
        res.writeHead(404).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, deliveries };
}

/** An int64 field of the webhook's JSON, exactly (JSON.parse would round beyond 2^53). */
function rawInteger(text: string, field: string): bigint {
  const match = new RegExp(`[{,]"${field}":(-?\\d+)[,}]`).exec(text);
  assert.ok(match, `no integer ${field} in ${text}`);
  return BigInt(match[1]!);
}

/** The events of the test: every kind of room, tenant, id, version, body and trace context. */
function batchEvents(base: number): Event[] {
  const rooms = ['room-1', 'room-2', '房间-3 🎤', 'room-4'];
  const types = ['RoomGiftSent', 'RoomMicChanged', 'RoomHeatChanged'];
  const binary = Buffer.from([...Array.from({ length: 256 }, (_, i) => i), 0, 255, 0]);
  const events: Event[] = [];
  for (let i = 0; i < 50; i++) {
    const bodies = [
      Buffer.alloc(0),
      binary,
      Buffer.from(`麦位 🎤 #${i}`),
      Buffer.from(JSON.stringify({ gift: 'rose', count: i })),
      new Uint8Array([0x0a, 0x00, i]),
    ];
    const versions = [BigInt(i + 2), 2n ** 53n + 1n, 2n ** 62n + BigInt(i), 2n ** 63n - 1n, -1n];
    const event = {
      ...build(rooms[i % rooms.length]!, types[i % types.length]!, versions[i % 5 === 1 ? (i % 4) + 1 : 0]!, base + i, bodies[i % 5]!),
      appCode: APP_CODES[i % 2]!,
    };
    if (i % 10 === 3) event.eventId = `evt_é_🎁_${i}_${base}`;
    if (i === 17) event.occurredAt = new Date(base + 17) as never;
    // Some carry a trace context (envelope fields 8 and 9), one with a tracestate too.
    if (i % 10 === 5) event.traceparent = `00-4bf92f3577b34da6a3ce929d0e0e4736-${(i + 1).toString(16).padStart(16, '0')}-01`;
    if (i === 15) event.tracestate = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
    events.push(event);
  }
  return events;
}

/** A remote parent (as an incoming request's traceparent would give) as an OpenTelemetry context. */
function remoteParent(traceFlags: TraceFlags, traceState?: string) {
  const parent: SpanContext = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags, isRemote: true };
  if (traceState !== undefined) parent.traceState = createTraceState(traceState);
  return trace.setSpanContext(ROOT_CONTEXT, parent);
}

/** Runs `fn` with a new span of the SDK's tracer active (a child of `parent`), ends the span, and
 * resolves with the span's traceparent, computed here from its ids and flags. */
async function inSpan(parent: ReturnType<typeof remoteParent>, fn: () => Promise<void>): Promise<string> {
  return tracer.startActiveSpan('enqueue gifts', {}, parent, async (span: Span) => {
    try {
      await fn();
    } finally {
      span.end();
    }
    const { traceId, spanId, traceFlags } = span.spanContext();
    return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
  });
}

/** The expected trace headers of a row: its trace context; no header for an empty value. */
function traceHeadersOf(row: { traceparent: string; tracestate: string }): TraceHeaders {
  const headers: TraceHeaders = {};
  if (row.traceparent !== '') headers.traceparent = [row.traceparent];
  if (row.tracestate !== '') headers.tracestate = [row.tracestate];
  return headers;
}

/** The whole scenario on `target`, with its own temp dir. */
export async function scenario(t: TestContext, target: Target): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outboxd-node-e2e-'));
  try {
    const { rows, deliveries, hostMs } = await run(target, dir);
    t.diagnostic(`${rows} rows written, ${deliveries} webhook requests received and checked, host run --drain took ${hostMs} ms`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function run(target: Target, dir: string): Promise<{ rows: number; deliveries: number; hostMs: number }> {
  // The table: made by the host's own migration.
  await outboxd(writeConfig(dir, target.url, 9), ['migrate']);
  await target.createBusinessTable();

  const base = Date.now();
  const single = build('room-1', 'RoomGiftSent', 1n, base, Buffer.from('{"gift":"rose","from":"u1","to":"u2"}'));
  const batch = batchEvents(base);
  const generatedIdEvent: Event = { appCode: 'live', eventType: 'RoomMicChanged', roomId: 'room-generated', roomVersion: 3, occurredAt: base };
  const repeat = { ...batch[0]!, roomId: 'room-repeat', body: Buffer.from('second copy') };

  // Events written in OpenTelemetry spans: those without a trace context of their own get the
  // span's, the one with its own (`own`) keeps it.
  const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const spanned = [1, 2, 3, 4, 5, 6].map((n) => ({
    ...build('room-traced', 'RoomGiftSent', BigInt(n), base, Buffer.from(`span ${n}`)),
    appCode: APP_CODES[n % 2]!,
    ...(n === 3 ? { traceparent: own } : {}),
  }));
  let sampledSpan = '';
  let unsampledSpan = '';

  // 1. Committed: the business row and the events.
  await target.transaction(true, async (tx) => {
    await tx.business('gift-1');
    assert.equal(await tx.enqueue(single), true, 'a new event is inserted');
    assert.equal(await tx.enqueueBatch([...batch, repeat, generatedIdEvent]), 51, 'a repeated id in a batch counts once');
    sampledSpan = await inSpan(remoteParent(TraceFlags.SAMPLED, SPAN_TRACESTATE), async () => {
      assert.equal(await tx.enqueue(spanned[0]!), true);
      assert.equal(await tx.enqueueBatch(spanned.slice(1, 4)), 3);
    });
    // A parent neither sampled nor with a trace state: the child's flags are 00, no tracestate.
    unsampledSpan = await inSpan(remoteParent(TraceFlags.NONE), async () => {
      assert.equal(await tx.enqueueBatch(spanned.slice(4)), 2);
    });
  });
  assert.match(sampledSpan, /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
  assert.match(unsampledSpan, /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$/);
  // What the events written in spans must carry: the span's trace context, unless their own.
  const spannedAsWritten = spanned.map((event, i) => {
    if (event.traceparent !== undefined) return event;
    return i < 4 ? { ...event, traceparent: sampledSpan, tracestate: SPAN_TRACESTATE } : { ...event, traceparent: unsampledSpan };
  });
  // 2. Rolled back: neither the business row nor the event.
  const rolledBack = build('room-1', 'RoomGiftSent', 99n, base, Buffer.from('never'));
  await target.transaction(false, async (tx) => {
    await tx.business('gift-rolled-back');
    assert.equal(await tx.enqueue(rolledBack), true);
  });
  // 3. Duplicates count 0, next to new events.
  const fresh = [build('room-2', 'RoomGiftSent', 100n, base, Buffer.from('x')), build('room-2', 'RoomGiftSent', 101n, base, Buffer.alloc(0))];
  await target.transaction(true, async (tx) => {
    await tx.business('gift-2');
    assert.equal(await tx.enqueue(single), false, 'a duplicate id counts 0');
    assert.equal(await tx.enqueueBatch([batch[0]!, batch[1]!, batch[3]!, ...fresh]), 2, 'only the new ids count');
  });

  assert.deepEqual((await target.businessIds()).sort(), ['gift-1', 'gift-2']);
  const stored = await target.outboxRows();
  const generated = stored.find((r) => r.room_id === 'room-generated');
  assert.ok(generated, 'the event without an id was written');
  assert.match(generated.event_id, new RegExp(`^evt_${base.toString(16).padStart(13, '0')}[0-9a-f]{16}$`));

  // What was written, by (app_code, event_id).
  const expected = new Map<string, ReturnType<typeof toRow>>();
  for (const event of [single, ...batch, { ...generatedIdEvent, eventId: generated.event_id }, ...fresh, ...spannedAsWritten]) {
    const row = toRow(event);
    expected.set(`${row.appCode}/${row.eventId}`, row);
  }
  assert.equal(expected.size, 1 + 50 + 1 + 2 + 6);
  assert.equal(stored.length, expected.size, 'one row per distinct event, none for the rolled-back one');
  for (const row of stored) {
    const want = expected.get(`${row.app_code}/${row.event_id}`);
    assert.ok(want, `unexpected row ${row.app_code}/${row.event_id}`);
    assert.deepEqual(
      { ...row, envelope: row.envelope.toString('hex') },
      {
        app_code: want.appCode,
        event_id: want.eventId,
        event_type: want.eventType,
        room_id: want.roomId,
        status: 'pending',
        envelope: encodeEnvelope(want).toString('hex'),
        created_at_ms: String(want.occurredAtMs),
        retry_count: '0',
        last_error: null,
        worker_id: '',
        lock_until_ms: null,
        next_retry_at_ms: '0',
        updated_at_ms: String(want.occurredAtMs),
      },
    );
  }

  // 4. The host delivers them through the webhook plugin.
  const receiver = await startReceiver();
  let hostMs = 0;
  try {
    await target.release?.();
    const config = writeConfig(dir, target.url, receiver.port);
    const started = Date.now();
    await outboxd(config, ['run', '--drain']);
    hostMs = Date.now() - started;
    await target.reacquire?.();
  } finally {
    await new Promise((resolve) => receiver.server.close(resolve));
  }

  const seen = new Set<string>();
  // The trace context headers of each delivery, by app_code/webhook-id (the webhook-id is the event id).
  const traces = new Map<string, TraceHeaders>();
  for (const { headers, trace: traceHeaders, text } of receiver.deliveries) {
    const json = JSON.parse(text) as Record<string, unknown>;
    assert.deepEqual(Object.keys(json).sort(), ['app_code', 'attempt', 'body', 'event_id', 'event_type', 'occurred_at_ms', 'room_id', 'room_version']);
    const key = `${json.app_code}/${json.event_id}`;
    const want = expected.get(key);
    assert.ok(want, `delivered an event that was not written: ${text}`);
    assert.equal(json.app_code, want.appCode);
    assert.equal(json.event_id, want.eventId);
    assert.equal(json.event_type, want.eventType);
    assert.equal(json.room_id, want.roomId);
    assert.equal(rawInteger(text, 'room_version'), want.roomVersion, `room_version of ${key}`);
    assert.equal(rawInteger(text, 'occurred_at_ms'), want.occurredAtMs, `occurred_at_ms of ${key}`);
    assert.equal(json.body, Buffer.from(want.body).toString('base64'), `body of ${key}`);
    assert.equal(json.attempt, 1, `attempt of ${key}`);
    // The Standard Webhooks signature over the payload, as a receiver would check it.
    const timestamp = String(headers['webhook-timestamp']);
    const mac = createHmac('sha256', Buffer.from(SECRET.slice('whsec_'.length), 'base64'))
      .update(`${want.eventId}.${timestamp}.${text}`)
      .digest('base64');
    assert.equal(headers['webhook-signature'], `v1,${mac}`, `signature of ${key}`);
    assert.ok(!seen.has(key), `${key} delivered twice`);
    seen.add(key);
    // Node reads header bytes as Latin-1; the plugin sends UTF-8 (an event id may be any text).
    const webhookId = Buffer.from(String(headers['webhook-id']), 'latin1').toString('utf8');
    assert.equal(webhookId, json.event_id, `webhook-id of ${key}`);
    traces.set(`${json.app_code}/${webhookId}`, traceHeaders);
  }
  assert.deepEqual([...seen].sort(), [...expected.keys()].sort(), 'every written event was delivered');
  // Every event arrived with the trace context it was written with (its own, or its span's) as the
  // headers traceparent and tracestate, or neither when it has none.
  const kinds = new Set<string>();
  for (const [key, want] of expected) {
    assert.deepEqual(traces.get(key), traceHeadersOf(want), `trace headers of ${key}`);
    kinds.add(`${want.traceparent !== ''}/${want.tracestate !== ''}`);
  }
  assert.deepEqual([...kinds].sort(), ['false/false', 'true/false', 'true/true'], 'events with and without a trace context and a tracestate');
  for (const span of [sampledSpan, unsampledSpan]) {
    assert.ok([...traces.values()].some((h) => h.traceparent?.[0] === span), `an event of span ${span} arrived with its traceparent`);
  }

  const after = await target.outboxRows();
  assert.equal(after.length, expected.size);
  const notDelivered = after.filter((r) => r.status !== 'delivered').map((r) => `${r.app_code}/${r.event_id}: ${r.status} ${r.last_error}`);
  assert.deepEqual(notDelivered, [], 'every row ends delivered');
  return { rows: after.length, deliveries: receiver.deliveries.length, hostMs };
}
