/** The optional bearer token (RFC 6750): compared in constant time (SHA-256 of both sides, then a full XOR scan). */

const encoder = new TextEncoder();

async function digest(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(s)));
}

/** Hashing first makes the comparison independent of both the length and the content of the guess. */
export async function tokensEqual(given: string, expected: string): Promise<boolean> {
  const [a, b] = await Promise.all([digest(given), digest(expected)]);
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** The token of an `Authorization: Bearer <token>` header, or null. */
export function bearerToken(header: string | undefined | null): string | null {
  if (!header) return null;
  const m = /^Bearer\s+(.+)$/i.exec(header.trim());
  return m ? m[1]!.trim() : null;
}

/** The `WWW-Authenticate` value of a 401: `invalid_token` when a token was given but is wrong (RFC 6750 §3). */
export function bearerChallenge(tokenGiven: boolean): string {
  return tokenGiven ? 'Bearer realm="agl", error="invalid_token"' : 'Bearer realm="agl"';
}
