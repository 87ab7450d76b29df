import { extendsModel, normaliseModel } from './models.js';

/**
 * Image parts of a prompt, held at what the provider can bill for them (docs/ai-proxy.md, Bounds:
 * images). Inline images (`data:` URLs) are measured from their header; images by URL are never
 * fetched (the proxy would become a fetcher of any URL, and the provider may see another image) and
 * are held at the family's maximum for the detail asked. The rules are OpenAI's "Calculating costs" of
 * its vision guide (platform.openai.com/docs/guides/images-vision).
 */

export interface ImageSize {
  width: number;
  height: number;
}

/** Width and height from a PNG, GIF, JPEG or WebP header; null for anything else or a cut header. */
export function imageSize(bytes: Uint8Array): ImageSize | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47 && b.toString('latin1', 12, 16) === 'IHDR') {
    return sized(b.readUInt32BE(16), b.readUInt32BE(20));
  }
  if (b.length >= 10 && (b.toString('latin1', 0, 6) === 'GIF87a' || b.toString('latin1', 0, 6) === 'GIF89a')) {
    return sized(b.readUInt16LE(6), b.readUInt16LE(8));
  }
  if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) return jpegSize(b);
  if (b.length >= 30 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') return webpSize(b);
  return null;
}

function sized(width: number, height: number): ImageSize | null {
  return width > 0 && height > 0 ? { width, height } : null;
}

/** Walk the JPEG segments to the first start-of-frame (SOF0–SOF15 but DHT, JPG, DAC). */
function jpegSize(b: Buffer): ImageSize | null {
  let i = 2;
  while (i + 4 <= b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i += 1; // fill byte
      continue;
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2; // markers without a length
      continue;
    }
    const length = b.readUInt16BE(i + 2);
    if (length < 2) return null;
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
    if (isFrame) {
      if (i + 9 > b.length) return null;
      return sized(b.readUInt16BE(i + 7), b.readUInt16BE(i + 5));
    }
    i += 2 + length;
  }
  return null;
}

function webpSize(b: Buffer): ImageSize | null {
  const chunk = b.toString('latin1', 12, 16);
  if (chunk === 'VP8X') return sized(1 + b.readUIntLE(24, 3), 1 + b.readUIntLE(27, 3));
  if (chunk === 'VP8L' && b[20] === 0x2f) {
    const bits = b.readUInt32LE(21);
    return sized(1 + (bits & 0x3fff), 1 + ((bits >>> 14) & 0x3fff));
  }
  if (chunk === 'VP8 ' && b[23] === 0x9d && b[24] === 0x01 && b[25] === 0x2a) {
    return sized(b.readUInt16LE(26) & 0x3fff, b.readUInt16LE(28) & 0x3fff);
  }
  return null;
}

export type Detail = 'low' | 'high';

/** 512-px tiles: `base` tokens, plus `tile` per tile of the image scaled into 2048² then to a shortest side of 768. */
interface TileRule {
  kind: 'tile';
  base: number;
  tile: number;
}

/** 32-px patches, at most 1536, times a multiplier; `detail` does not change it. */
interface PatchRule {
  kind: 'patch';
  multiplier: number;
}

export type ImageRule = TileRule | PatchRule;

/**
 * The published rules, by normalised model family, most specific first. o1/o3 are published at 75/150:
 * they are held at 85/170, an upper bound, with their family.
 */
const RULES: Array<[string, ImageRule]> = [
  ['gpt-4.1-mini', { kind: 'patch', multiplier: 1.62 }],
  ['gpt-4.1-nano', { kind: 'patch', multiplier: 2.46 }],
  ['o4-mini', { kind: 'patch', multiplier: 1.72 }],
  ['gpt-4o-mini', { kind: 'tile', base: 2833, tile: 5667 }],
  ['gpt-4o', { kind: 'tile', base: 85, tile: 170 }],
  ['gpt-4.1', { kind: 'tile', base: 85, tile: 170 }],
  ['o1', { kind: 'tile', base: 85, tile: 170 }],
  ['o3', { kind: 'tile', base: 85, tile: 170 }],
];

/** The image rule of a model's family, or null when none is known (then AI_IMAGE_MAX_TOKENS is held). */
export function imageRuleOf(model: string): ImageRule | null {
  const name = normaliseModel(model);
  for (const [family, rule] of RULES) if (extendsModel(name, family)) return rule;
  return null;
}

const MAX_PATCHES = 1536;

/** Tokens of one image of that size (null: unknown size, the family's maximum for the detail). */
export function imageTokens(rule: ImageRule, detail: Detail, size: ImageSize | null): number {
  if (rule.kind === 'patch') {
    // Above 1536 patches the image is scaled down to fit; the cap is an upper bound of the scaled count.
    const patches = size === null ? MAX_PATCHES : Math.min(MAX_PATCHES, Math.ceil(size.width / 32) * Math.ceil(size.height / 32));
    return Math.ceil(patches * rule.multiplier);
  }
  if (detail === 'low') return rule.base;
  return rule.base + rule.tile * (size === null ? maxTiles() : tiles(size));
}

function tiles({ width, height }: ImageSize): number {
  let w = width;
  let h = height;
  const fit = Math.min(1, 2048 / Math.max(w, h));
  w *= fit;
  h *= fit;
  const shortest = Math.min(w, h);
  if (shortest > 768) {
    w *= 768 / shortest;
    h *= 768 / shortest;
  }
  return Math.ceil(w / 512) * Math.ceil(h / 512);
}

/** The most tiles any image can take: 2048 × 768 after scaling, 4 × 2. */
function maxTiles(): number {
  return 8;
}
