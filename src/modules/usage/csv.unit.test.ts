import { describe, expect, it } from 'vitest';
import { parseCsv } from '../../../test/csv-reader.js';
import { acceptsCsv, csvDocument, plainCell, textCell } from './csv.js';

describe('CSV cells', () => {
  it('quotes what needs quoting and doubles quotes', () => {
    expect(textCell('plain')).toBe('plain');
    expect(textCell('a,b')).toBe('"a,b"');
    expect(textCell('say "hi"')).toBe('"say ""hi"""');
    expect(textCell('two\nlines')).toBe('"two\nlines"');
    expect(textCell('cr\rhere')).toBe('"cr\rhere"');
    expect(textCell(null)).toBe('');
    expect(plainCell(null)).toBe('');
    expect(plainCell(false)).toBe('false');
    expect(plainCell(12)).toBe('12');
  });

  it('neutralises cells a spreadsheet would evaluate', () => {
    for (const start of ['=', '+', '-', '@', '\t', '\r']) expect(textCell(`${start}1+1`).replace(/^"/, '').startsWith(`'${start}`), JSON.stringify(start)).toBe(true);
    expect(textCell('=HYPERLINK("x")')).toBe('"\'=HYPERLINK(""x"")"');
    expect(textCell('a=b')).toBe('a=b');
    expect(textCell("'already")).toBe("'already");
  });

  it('neutralises a formula where a ";" locale spreadsheet splits the cell, and quotes that cell (docs/usage-analytics.md, CSV export)', () => {
    expect(textCell("x;=cmd|' /C calc'!A0")).toBe(`"x;'=cmd|' /C calc'!A0"`);
    expect(textCell('x;=HYPERLINK(CHAR(104)&A2);')).toBe(`"x;'=HYPERLINK(CHAR(104)&A2);"`);
    expect(textCell('ok; @SUM(1+1)')).toBe(`"ok;' @SUM(1+1)"`);
    expect(textCell('a\t+1;\u00a0-2')).toBe(`"a\t'+1;'\u00a0-2"`);
    expect(textCell(' =1+2')).toBe("' =1+2");
    expect(textCell('a;b')).toBe('"a;b"');
    expect(textCell('a;b=c')).toBe('"a;b=c"');
    // However a spreadsheet splits the line, no piece of a text cell starts a formula.
    for (const payload of ["x;=cmd|' /C calc'!A0", 'ok;@SUM(1+1)*cmd', 'a\t=1', 'a; \t=1', ';-1', '=1;+2']) {
      for (const piece of textCell(payload).replace(/^"|"$/g, '').split(/[;\t]/)) expect(piece, payload).not.toMatch(/^\s*[=+\-@]/);
    }
  });

  it('reads back as written', () => {
    const doc = csvDocument(['a', 'b'], [[textCell('x,"y"\r\nz'), textCell('=1')], [plainCell(1), textCell(null)]]);
    expect(parseCsv(doc)).toEqual([['a', 'b'], ['x,"y"\r\nz', "'=1"], ['1', '']]);
  });
});

describe('Accept negotiation', () => {
  it('CSV only when text/csv is asked for and not below application/json', () => {
    expect(acceptsCsv('text/csv')).toBe(true);
    expect(acceptsCsv('TEXT/CSV; charset=utf-8')).toBe(true);
    expect(acceptsCsv('text/csv, application/json')).toBe(true);
    expect(acceptsCsv('application/json;q=0.5, text/csv')).toBe(true);
    expect(acceptsCsv(undefined)).toBe(false);
    expect(acceptsCsv('*/*')).toBe(false);
    expect(acceptsCsv('text/*')).toBe(false);
    expect(acceptsCsv('text/csv;q=0')).toBe(false);
    expect(acceptsCsv('text/csv;q=0.4, application/json')).toBe(false);
    expect(acceptsCsv('text/csv;q=abc')).toBe(false);
  });
});
