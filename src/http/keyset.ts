/** Kept for the modules that import it by this name; the one decoder lives in envelope.ts. */
export { decodeCursor as decodeKeyset, type KeysetPosition } from './envelope.js';
