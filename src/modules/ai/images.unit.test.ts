import { describe, expect, it } from 'vitest';
import { imageRuleOf, imageSize, imageTokens } from './images.js';

/** docs/ai-proxy.md, Bounds: images. Headers built byte by byte; the rules' examples are OpenAI's. */

function png(width: number, height: number): Buffer {
  const b = Buffer.alloc(33);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(b, 0);
  b.writeUInt32BE(13, 8);
  b.write('IHDR', 12, 'latin1');
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  return b;
}

function gif(width: number, height: number): Buffer {
  const b = Buffer.alloc(13);
  b.write('GIF89a', 0, 'latin1');
  b.writeUInt16LE(width, 6);
  b.writeUInt16LE(height, 8);
  return b;
}

/** SOI, an APP0 segment and a DHT segment before the frame, as real files have. */
function jpeg(width: number, height: number, frameMarker = 0xc0): Buffer {
  const app0 = Buffer.from([0xff, 0xe0, 0x00, 0x10, ...Buffer.from('JFIF\0'), 1, 1, 0, 0, 1, 0, 1, 0, 0]);
  const dht = Buffer.from([0xff, 0xc4, 0x00, 0x04, 0x00, 0x00]);
  const sof = Buffer.alloc(19);
  sof.writeUInt8(0xff, 0);
  sof.writeUInt8(frameMarker, 1);
  sof.writeUInt16BE(17, 2);
  sof.writeUInt8(8, 4);
  sof.writeUInt16BE(height, 5);
  sof.writeUInt16BE(width, 7);
  return Buffer.concat([Buffer.from([0xff, 0xd8]), app0, dht, sof]);
}

function webp(kind: 'VP8X' | 'VP8L' | 'VP8 ', width: number, height: number): Buffer {
  const b = Buffer.alloc(40);
  b.write('RIFF', 0, 'latin1');
  b.writeUInt32LE(32, 4);
  b.write('WEBP', 8, 'latin1');
  b.write(kind, 12, 'latin1');
  if (kind === 'VP8X') {
    b.writeUIntLE(width - 1, 24, 3);
    b.writeUIntLE(height - 1, 27, 3);
  } else if (kind === 'VP8L') {
    b[20] = 0x2f;
    b.writeUInt32LE(((width - 1) & 0x3fff) | (((height - 1) & 0x3fff) << 14), 21);
  } else {
    b[23] = 0x9d;
    b[24] = 0x01;
    b[25] = 0x2a;
    b.writeUInt16LE(width, 26);
    b.writeUInt16LE(height, 28);
  }
  return b;
}

describe('imageSize reads the dimensions from the header', () => {
  it('PNG, GIF, JPEG (baseline and progressive), WebP (VP8X, VP8L, VP8)', () => {
    expect(imageSize(png(4000, 1500))).toEqual({ width: 4000, height: 1500 });
    expect(imageSize(gif(320, 200))).toEqual({ width: 320, height: 200 });
    expect(imageSize(jpeg(1024, 768))).toEqual({ width: 1024, height: 768 });
    expect(imageSize(jpeg(640, 480, 0xc2))).toEqual({ width: 640, height: 480 });
    expect(imageSize(webp('VP8X', 5000, 3000))).toEqual({ width: 5000, height: 3000 });
    expect(imageSize(webp('VP8L', 300, 200))).toEqual({ width: 300, height: 200 });
    expect(imageSize(webp('VP8 ', 800, 600))).toEqual({ width: 800, height: 600 });
  });

  it('null for anything else: unknown formats, cut headers, zero sizes, a JPEG without a frame', () => {
    for (const bytes of [Buffer.alloc(0), Buffer.from('hello world, not an image'), png(100, 100).subarray(0, 20), png(0, 10), gif(5, 0), jpeg(10, 10).subarray(0, 30), Buffer.from([0xff, 0xd8, 0x00, 0x00])]) {
      expect(imageSize(bytes)).toBeNull();
    }
  });
});

describe('imageTokens: OpenAI\'s rules by model family', () => {
  const tile = imageRuleOf('gpt-4o')!;
  it('tiles (gpt-4o, gpt-4.1, o1/o3): 85 + 170 per 512-px tile after scaling into 2048² and to a shortest side of 768', () => {
    expect(imageTokens(tile, 'high', { width: 1024, height: 1024 })).toBe(765);
    expect(imageTokens(tile, 'high', { width: 2048, height: 4096 })).toBe(1105);
    expect(imageTokens(tile, 'high', { width: 4000, height: 1500 })).toBe(85 + 170 * 8);
    // A small image is not scaled up: one tile.
    expect(imageTokens(tile, 'high', { width: 128, height: 64 })).toBe(255);
    expect(imageTokens(tile, 'low', { width: 4000, height: 4000 })).toBe(85);
    // Unknown size (by URL): the most any image can take at that detail.
    expect(imageTokens(tile, 'high', null)).toBe(1445);
    expect(imageTokens(tile, 'low', null)).toBe(85);
    for (const model of ['gpt-4.1', 'openai/o3', 'o1-2024-12-17', 'GPT-4o-2024-08-06']) expect(imageRuleOf(model), model).toEqual(tile);
  });

  it('gpt-4o-mini: 2833 + 5667 per tile', () => {
    const mini = imageRuleOf('gpt-4o-mini-2024-07-18')!;
    expect(imageTokens(mini, 'high', { width: 1024, height: 1024 })).toBe(2833 + 4 * 5667);
    expect(imageTokens(mini, 'low', null)).toBe(2833);
    expect(imageTokens(mini, 'high', null)).toBe(2833 + 8 * 5667);
  });

  it('patches (gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72): 32-px patches, at most 1536, detail ignored', () => {
    const mini = imageRuleOf('gpt-4.1-mini')!;
    expect(imageTokens(mini, 'high', { width: 1024, height: 1024 })).toBe(Math.ceil(1024 * 1.62));
    expect(imageTokens(mini, 'low', { width: 1024, height: 1024 })).toBe(Math.ceil(1024 * 1.62));
    expect(imageTokens(mini, 'high', { width: 100, height: 33 })).toBe(Math.ceil(4 * 2 * 1.62));
    expect(imageTokens(mini, 'high', { width: 1800, height: 2400 })).toBe(Math.ceil(1536 * 1.62));
    expect(imageTokens(imageRuleOf('gpt-4.1-nano')!, 'low', null)).toBe(Math.ceil(1536 * 2.46));
    expect(imageTokens(imageRuleOf('o4-mini')!, 'high', null)).toBe(Math.ceil(1536 * 1.72));
  });

  it('families without a published rule have none (AI_IMAGE_MAX_TOKENS is held)', () => {
    for (const model of ['chatgpt-4o-latest', 'llava-1.6', 'claude-3-5-sonnet', 'gpt-5']) expect(imageRuleOf(model), model).toBeNull();
  });
});
