import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/**
 * Signing secrets at rest (docs/accounts.md, Bearer secrets): AES-256-GCM under a key derived from ENCRYPTION_KEY, stored as
 * `v1:<base64url(iv | tag | ciphertext)>`. The version prefix leaves room for key rotation.
 */
function keyOf(encryptionKey: string): Buffer {
  return createHash('sha256').update(`creditgate:secrets:v1:${encryptionKey}`).digest();
}

export function encryptSecret(encryptionKey: string, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyOf(encryptionKey), iv);
  const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return `v1:${Buffer.concat([iv, cipher.getAuthTag(), data]).toString('base64url')}`;
}

export function decryptSecret(encryptionKey: string, stored: string): string {
  if (!stored.startsWith('v1:')) throw new Error('unknown secret format');
  const raw = Buffer.from(stored.slice(3), 'base64url');
  const decipher = createDecipheriv('aes-256-gcm', keyOf(encryptionKey), raw.subarray(0, 12));
  decipher.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
}
