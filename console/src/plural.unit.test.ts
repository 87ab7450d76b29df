import { describe, expect, it } from 'vitest';
import { countOf, plural } from './plural';

describe('counts in words', () => {
  it('one is singular; zero, several and fractions are plural', () => {
    expect(countOf(1, 'key')).toBe('1 key');
    expect(countOf(0, 'key')).toBe('0 keys');
    expect(countOf(2, 'key')).toBe('2 keys');
    expect(countOf(1.5, 'credit')).toBe('1.5 credits');
    expect(plural(1, 'call')).toBe('call');
    expect(plural(3, 'call')).toBe('calls');
  });

  it('an irregular plural is named, and large counts are grouped', () => {
    expect(countOf(1, 'entry', 'entries')).toBe('1 entry');
    expect(countOf(21, 'entry', 'entries')).toBe('21 entries');
    expect(countOf(1, 'delivery', 'deliveries')).toBe('1 delivery');
    expect(countOf(1200, 'record')).toBe('1,200 records');
  });
});
