import assert from 'node:assert/strict';
import { test } from 'node:test';

import { EventIdGenerator, newEventId, OutboxError } from '@outboxd/producer';

const FORMAT = /^evt_[0-9a-f]{13}[0-9a-f]{16}$/;
const tail = (id: string) => BigInt(`0x${id.slice(17)}`);

test('an id is evt_ + 13 hex digits of ms + 16 hex digits', () => {
  const id = newEventId(1_700_000_000_000);
  assert.match(id, FORMAT);
  assert.equal(id.slice(0, 17), 'evt_0018bcfe56800');
});

test('ids of one millisecond sort in the order they were made, each one more than the last', () => {
  const gen = new EventIdGenerator();
  const ids = Array.from({ length: 1000 }, () => gen.next(5_000));
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1]! < ids[i]!, `${ids[i - 1]} !< ${ids[i]}`);
    assert.equal(tail(ids[i]!), tail(ids[i - 1]!) + 1n);
  }
  assert.ok(ids.every((id) => FORMAT.test(id) && id.startsWith('evt_0000000001388')));
  assert.equal(new Set(ids).size, ids.length);
});

test('a new millisecond starts from a random tail and sorts after the last', () => {
  const gen = new EventIdGenerator();
  const a = gen.next(6_000);
  const b = gen.next(6_001);
  assert.ok(a < b);
  assert.ok(b.startsWith('evt_0000000001771'));
  // Random first tails: 20 generators for one millisecond do not all agree.
  const firsts = new Set(Array.from({ length: 20 }, () => new EventIdGenerator().next(7_000)));
  assert.ok(firsts.size > 1);
});

test('the process-wide generator is monotonic within a millisecond too', () => {
  const ids = Array.from({ length: 100 }, () => newEventId(8_000));
  assert.deepEqual([...ids].sort(), ids);
  assert.equal(new Set(ids).size, 100);
});

test('negative milliseconds count as 0; default is now', () => {
  assert.ok(newEventId(-5).startsWith('evt_0000000000000'));
  assert.ok(newEventId(-5n).startsWith('evt_0000000000000'));
  const before = Date.now();
  const id = newEventId();
  const after = Date.now();
  const ms = Number.parseInt(id.slice(4, 17), 16);
  assert.ok(ms >= before && ms <= after, `${ms} not in [${before}, ${after}]`);
});

test('milliseconds that are not numbers are refused', () => {
  assert.throws(() => newEventId(Number.NaN), OutboxError);
  assert.throws(() => newEventId('5' as unknown as number), OutboxError);
});
