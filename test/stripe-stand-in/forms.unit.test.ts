import { describe, expect, it } from 'vitest';
import { StripeApiError } from './errors.js';
import { mergeMetadata, parseForm, rejectUnknown, stringMap, text } from './forms.js';

describe('the bracket-notation form parser', () => {
  it('unfolds nested keys and indexed arrays as the SDK sends them', () => {
    const form = parseForm('mode=payment&line_items[0][price]=price_1&line_items%5B0%5D%5Bquantity%5D=2&metadata[org]=o+1&expand[]=a&expand[]=b');
    expect(JSON.parse(JSON.stringify(form))).toEqual({
      mode: 'payment',
      line_items: { '0': { price: 'price_1', quantity: '2' } },
      metadata: { org: 'o 1' },
      expand: { '0': 'a', '1': 'b' },
    });
    expect(text(form, 'line_items[0][price]')).toBe('price_1');
    expect(stringMap(form, 'metadata')).toEqual({ org: 'o 1' });
  });

  it('refuses a key that is both a value and an object, and keeps __proto__ an ordinary key', () => {
    expect(() => parseForm('a=1&a[b]=2')).toThrow(StripeApiError);
    const form = parseForm('metadata[__proto__]=x');
    expect(stringMap(form, 'metadata')).toEqual(JSON.parse('{"__proto__":"x"}'));
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('applies Stripe’s metadata rules: merge, unset with an empty value, clear with metadata=', () => {
    const current = { a: '1', b: '2' };
    expect(mergeMetadata(current, parseForm('metadata[b]=&metadata[c]=3'))).toEqual({ a: '1', c: '3' });
    expect(mergeMetadata(current, parseForm('metadata='))).toEqual({});
    expect(mergeMetadata(current, parseForm('name=x'))).toEqual(current);
    expect(() => mergeMetadata({}, parseForm(`metadata[${'k'.repeat(41)}]=v`))).toThrow(/40 characters/);
  });

  it('names the first parameter a route does not model', () => {
    const allowed = { line_items: { '0': { price: true } }, metadata: 'hash' } as const;
    expect(() => rejectUnknown(parseForm('line_items[0][price]=p&metadata[x]=y'), allowed)).not.toThrow();
    const error = (() => {
      try {
        rejectUnknown(parseForm('line_items[1][price]=p'), allowed);
      } catch (e) {
        return e as StripeApiError;
      }
    })();
    expect(error?.body).toMatchObject({ param: 'line_items[1]', code: 'parameter_unknown' });
  });
});
