import { describe, expect, it } from 'vitest';
import { endUserHeader } from './end-user.js';

/** The X-End-User-Id header as its sender wrote it (docs/budgets.md): Node hands a header's bytes over as latin1. */
const asNodeReadsIt = (text: string) => Buffer.from(text, 'utf8').toString('latin1');
const header = (value: string | undefined) => endUserHeader({ headers: value === undefined ? {} : { 'x-end-user-id': value } });

describe('endUserHeader', () => {
  it('reads UTF-8 bytes as the text they encode, and leaves ASCII, other bytes and no header as they are', () => {
    expect(asNodeReadsIt('José')).toBe('JosÃ©');
    expect(header(asNodeReadsIt('José'))).toBe('José');
    expect(header(asNodeReadsIt('ユーザー 7'))).toBe('ユーザー 7');
    expect(header('dave')).toBe('dave');
    // A latin1 é (one byte 0xE9) is no UTF-8: kept as read.
    expect(header('Jos\u00e9')).toBe('Jos\u00e9');
    expect(header(undefined)).toBeUndefined();
  });
});
