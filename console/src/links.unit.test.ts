import { describe, expect, it } from 'vitest';
import { sameOriginNext, webUrl } from './links';

const ORIGIN = 'https://console.example.com';

describe('links the console follows', () => {
  it('follows a next link on this origin only, resolved as a browser resolves it', () => {
    expect(sameOriginNext('</organizations/o/usage/records?cursor=abc>; rel="next"', ORIGIN)).toBe('/organizations/o/usage/records?cursor=abc');
    expect(sameOriginNext('<https://console.example.com/x?cursor=1>; rel=next', ORIGIN)).toBe('/x?cursor=1');
    expect(sameOriginNext('</a>; rel="prev", </b>; rel="next"', ORIGIN)).toBe('/b');
    expect(sameOriginNext(null, ORIGIN)).toBeNull();
    expect(sameOriginNext('</a>; rel="prev"', ORIGIN)).toBeNull();
    // Elsewhere: another host, a scheme-relative path, a backslash path (a browser reads "/\host" as "//host").
    for (const target of ['https://evil.example/x', '//evil.example/x', '/\\evil.example/x', 'http://console.example.com/x']) {
      expect(sameOriginNext(`<${target}>; rel="next"`, ORIGIN), target).toBeNull();
    }
  });

  it('links and sends the browser to http(s) addresses only', () => {
    expect(webUrl('https://checkout.stripe.com/c/pay/cs_test_1')).toBe('https://checkout.stripe.com/c/pay/cs_test_1');
    expect(webUrl('http://127.0.0.1:4242/portal')).toBe('http://127.0.0.1:4242/portal');
    for (const bad of ['javascript:alert(1)', 'JAVASCRIPT:alert(1)', 'data:text/html,x', 'not a url', '', null, undefined]) {
      expect(webUrl(bad), String(bad)).toBeNull();
    }
  });
});
