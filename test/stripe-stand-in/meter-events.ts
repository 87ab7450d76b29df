import { randomUUID } from 'node:crypto';
import { findOrThrow, invalidParam } from './errors.js';
import type { MeterEventObject } from './objects.js';
import { type StandInContext, snapshot } from './state.js';

const MAX_AGE_SECONDS = 35 * 24 * 3600;
const MAX_FUTURE_SECONDS = 5 * 60;

export interface MeterEventInput {
  eventName: string;
  payload: Record<string, string>;
  identifier?: string;
  timestamp?: number;
}

/**
 * `POST /v1/billing/meter_events`. Stripe enforces an identifier's uniqueness over (at least) 24 hours and
 * drops the repeat; the stand-in keeps every identifier forever and answers a repeat with the stored event,
 * counted once.
 */
export function recordMeterEvent(ctx: StandInContext, input: MeterEventInput): MeterEventObject {
  const now = ctx.clock.seconds();
  const timestamp = input.timestamp ?? now;
  validate(ctx, input, timestamp, now);
  const identifier = input.identifier ?? randomUUID();
  const stored = ctx.state.meterEvents.get(identifier);
  if (stored) return snapshot(stored);
  const event: MeterEventObject = {
    object: 'billing.meter_event',
    created: now,
    event_name: input.eventName,
    identifier,
    livemode: false,
    payload: { ...input.payload },
    timestamp,
  };
  ctx.state.meterEvents.set(identifier, event);
  return snapshot(event);
}

function validate(ctx: StandInContext, input: MeterEventInput, timestamp: number, now: number): void {
  if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(input.eventName)) throw invalidParam('event_name', `Invalid event_name: ${input.eventName}`);
  const customer = input.payload['stripe_customer_id'];
  if (!customer) throw invalidParam('payload[stripe_customer_id]', 'Missing required param: payload[stripe_customer_id].', 'parameter_missing');
  findOrThrow(ctx.state.customers, customer, 'customer', 'payload[stripe_customer_id]');
  const value = input.payload['value'];
  if (value === undefined) throw invalidParam('payload[value]', 'Missing required param: payload[value].', 'parameter_missing');
  if (!/^-?\d{1,15}$/.test(value)) throw invalidParam('payload[value]', `Invalid payload[value]: ${value} is not a whole number`);
  if (input.identifier !== undefined && (input.identifier.length < 1 || input.identifier.length > 100)) {
    throw invalidParam('identifier', 'Invalid identifier: 1 to 100 characters');
  }
  if (timestamp < now - MAX_AGE_SECONDS) {
    throw invalidParam('timestamp', 'Timestamp must be within the past 35 calendar days.', 'timestamp_too_far_in_past');
  }
  if (timestamp > now + MAX_FUTURE_SECONDS) {
    throw invalidParam('timestamp', 'Timestamp must not be more than 5 minutes in the future.', 'timestamp_in_future');
  }
}
