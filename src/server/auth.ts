/** The optional bearer token (RFC 6750): compared in constant time (SHA-256 of both sides, then a full XOR scan). */
import type { Context, MiddlewareHandler } from "hono";
import { ValidationError } from "../types/index.ts";
import { HttpProblem, errorResponse } from "./errors.ts";

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

/**
 * The store server's check: every request but those `isPublic` lets through needs
 * `Authorization: Bearer <token>`, else a 401 in the JSON error shape with a `WWW-Authenticate` challenge.
 */
export function bearerAuth(token: string, isPublic: (c: Context) => boolean): MiddlewareHandler {
  // An empty token would lock every route (or, read as "no token", open them all): refuse it.
  if (token.trim() === "")
    throw new ValidationError("token must not be empty; leave it out (null) to serve without authentication", ["token"]);
  return async (c, next) => {
    if (isPublic(c)) return next();
    const given = bearerToken(c.req.header("authorization"));
    if (given === null || !(await tokensEqual(given, token))) {
      const { body: payload } = errorResponse(
        new HttpProblem(
          401,
          "Unauthorized",
          given === null ? "Missing bearer token (Authorization: Bearer <token>)" : "Invalid bearer token",
        ),
      );
      return c.json(payload, 401, { "www-authenticate": bearerChallenge(given !== null) });
    }
    return next();
  };
}
