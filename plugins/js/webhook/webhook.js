// The `webhook-js` publisher plugin (JavaScript, componentize-js): POSTs each event to a URL as
// a Standard Webhooks request over wasi:http (`fetch`), the requests of a batch concurrently.
//
// Settings: `url` (required, http:// or https://), `secret` (required, `whsec_<base64>`, several
// space-separated during a rotation). Timeouts are the sink's limits (`connect_timeout`,
// `first_byte_timeout`, `publish_timeout`), enforced by the host. The body is the event's JSON
// form (every field, the body base64), with `webhook-id` (the event id), `webhook-timestamp` and
// `webhook-signature` (`v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>` per secret),
// and the event's W3C trace context as `traceparent` / `tracestate` when it carries one.
// Answers: 2xx delivered; 429 and 5xx retryable (rate-limited when `Retry-After` gives seconds);
// 410, other 4xx and 3xx permanent; transport errors retryable. The sink needs
// `limits.allow_hosts` for the URL. Known limits of componentize-js 0.23's `fetch`: a request
// the host's allowlist refuses surfaces as a generic `NetworkError` (retryable, not permanent
// as in the Rust webhook plugin) or traps the runtime, and so does a refused connection (a trap
// fails the whole batch as retryable and the instance is rebuilt).

import { log } from 'outbox:publisher/logging@0.1.2';
import { contextOf } from 'outbox:publisher/trace@0.1.2';

const SNIPPET_CHARS = 200;
const SETTINGS = ['url', 'secret'];

let settings = null;

/** init: parses and checks the settings; a thrown string is the error outboxd shows. */
export function init(config) {
  const values = new Map(config);
  for (const key of values.keys()) {
    if (!SETTINGS.includes(key)) {
      throw `webhook-js plugin: unknown setting \`${key}\`: the settings are ${SETTINGS.join(', ')}`;
    }
  }
  const url = values.get('url');
  if (!url) throw 'webhook-js plugin: the `url` setting is required';
  if (!/^https?:\/\/[^/?#@\s]+/i.test(url)) {
    throw `webhook-js plugin: bad \`url\`: \`${url}\` must start with http:// or https:// and name a host`;
  }
  const secret = values.get('secret');
  if (!secret) throw 'webhook-js plugin: the `secret` setting is required (whsec_<base64>)';
  const keys = secret.split(/\s+/).filter(Boolean).map((part, index) => {
    try {
      const bytes = fromBase64(part.replace(/^whsec_/, ''));
      if (bytes.length === 0) throw new Error('empty');
      return bytes;
    } catch {
      throw `webhook-js plugin: secret #${index + 1} is not \`whsec_\` followed by base64`;
    }
  });
  if (keys.length === 0) throw 'webhook-js plugin: `secret` is empty';
  settings = { url, keys };
  log('info', `webhook-js plugin: posting to ${url.split(/[?#]/)[0]} with ${keys.length} signing secret(s)`);
}

/** publish: one signed request per event, all in flight at once; one result per event. */
export async function publish(batch) {
  if (settings === null) {
    return batch.map(() => retryable('webhook-js plugin: publish before init'));
  }
  const timestamp = Math.floor(Date.now() / 1000);
  return Promise.all(batch.map((event) => send(event, timestamp)));
}

async function send(event, timestamp) {
  const body = eventJson(event);
  const signatures = await Promise.all(
    settings.keys.map((key) => sign(key, `${event.eventId}.${timestamp}.${body}`)),
  );
  const headers = {
    'content-type': 'application/json',
    'webhook-id': event.eventId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatures.map((s) => `v1,${s}`).join(' '),
  };
  const trace = contextOf(event.eventId);
  if (trace) {
    headers.traceparent = trace.traceparent;
    if (trace.tracestate) headers.tracestate = trace.tracestate;
  }
  let response;
  try {
    response = await fetch(settings.url, { method: 'POST', headers, body });
  } catch (error) {
    const why = String(error && error.message ? error.message : error);
    if (/denied/i.test(why)) {
      return permanent(
        "webhook-js: request denied by the host: the URL's origin is not in the sink's limits.allow_hosts",
      );
    }
    return retryable(`webhook-js: transport error: ${why}`);
  }
  const text = await response.text().catch(() => '');
  return classify(response.status, response.headers.get('retry-after'), text);
}

/** The publish result of an HTTP answer. */
function classify(status, retryAfter, text) {
  const snippet = text.trim().replace(/[\u0000-\u001f]/g, ' ');
  const quoted = snippet.length > SNIPPET_CHARS ? `${snippet.slice(0, SNIPPET_CHARS)}…` : snippet;
  const message = quoted ? `webhook-js: HTTP ${status}: ${quoted}` : `webhook-js: HTTP ${status}`;
  if (status >= 200 && status < 300) return { tag: 'ok', val: undefined };
  if (status === 410) return permanent(`${message} (the endpoint is gone)`);
  if (status === 429 || status >= 500) {
    const seconds = retryAfter !== null && /^\s*\d+\s*$/.test(retryAfter) ? Number(retryAfter) : null;
    if (seconds !== null) {
      return { tag: 'err', val: { tag: 'rate-limited', val: { message, retryAfterMs: BigInt(seconds * 1000) } } };
    }
    return retryable(message);
  }
  if (status >= 300 && status < 500) return permanent(message);
  return retryable(message);
}

/** The event's JSON form: every field, the body base64 (the Rust SDK's `event_json`). */
function eventJson(event) {
  return (
    `{"app_code":${JSON.stringify(event.appCode)},"event_id":${JSON.stringify(event.eventId)},` +
    `"event_type":${JSON.stringify(event.eventType)},"room_id":${JSON.stringify(event.roomId)},` +
    `"room_version":${event.roomVersion},"occurred_at_ms":${event.occurredAtMs},` +
    `"attempt":${event.attempt},"body":${JSON.stringify(toBase64(event.body))}}`
  );
}

/** base64 HMAC-SHA256 of `text` with `key`. */
async function sign(key, text) {
  const cryptoKey = await crypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const mac = await crypto.subtle.sign('HMAC', cryptoKey, new TextEncoder().encode(text));
  return toBase64(new Uint8Array(mac));
}

function toBase64(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
  return btoa(binary);
}

function fromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function retryable(message) {
  return { tag: 'err', val: { tag: 'retryable', val: message } };
}

function permanent(message) {
  return { tag: 'err', val: { tag: 'permanent', val: message } };
}
