/**
 * The optional bearer token (RFC 6750) of the store server, the policy server and the LLM proxy, checked
 * by hono's `bearerAuth` (the header parsed, the token compared in constant time, the challenge set);
 * each server answers a refusal in its own error shape.
 */
import type { Context, MiddlewareHandler } from "hono";
import { bearerAuth as honoBearerAuth } from "hono/bearer-auth";
import { HTTPException } from "hono/http-exception";
import { ValidationError } from "../types/index.ts";
import { HttpProblem, errorResponse } from "./errors.ts";

/** RFC 6750's b64token, the only token a `Bearer` header can carry (hono refuses any other). */
const B64TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;
const CHALLENGE = 'Bearer realm="agl"';

export interface BearerAuthOptions {
  token: string;
  /** Requests served without a token (the health check, the dashboard's files). */
  isPublic: (c: Context) => boolean;
  /** The JSON body of a 401 saying `detail` to request `c`; default: the store's error shape (errors.ts). */
  refusal?: (detail: string, c: Context) => unknown;
  /**
   * A header that may carry the token bare, on the requests `on` picks that send no Authorization
   * (Anthropic's clients send their key as `x-api-key`).
   */
  keyHeader?: { name: string; on: (c: Context) => boolean };
}

const storeRefusal = (detail: string): unknown => errorResponse(new HttpProblem(401, "Unauthorized", detail)).body;

/** Refuses, at startup, a token no request could match. */
function checkToken(token: string): void {
  // An empty token would lock every route (or, read as "no token", open them all).
  if (token.trim() === "")
    throw new ValidationError("token must not be empty; leave it out (null) to serve without authentication", ["token"]);
  if (!B64TOKEN.test(token))
    throw new ValidationError(
      "token must be a bearer token (RFC 6750): letters, digits and - . _ ~ + /, with = only at the end (e.g. `openssl rand -hex 32`)",
      ["token"],
    );
}

/**
 * Every request but those `isPublic` lets through needs `Authorization: Bearer <token>` (or, where
 * `keyHeader` applies, that header holding the token); otherwise a 401 with `WWW-Authenticate: Bearer
 * realm="agl"` (plus `error="invalid_token"` when a token was given but is wrong).
 */
export function bearerAuth({ token, isPublic, refusal = storeRefusal, keyHeader }: BearerAuthOptions): MiddlewareHandler {
  checkToken(token);
  const refuse = (detail: string) => (c: Context) => c.json(refusal(detail, c), 401);
  const check = honoBearerAuth({
    token,
    realm: "agl",
    noAuthenticationHeader: { message: refuse("Missing bearer token (Authorization: Bearer <token>)") },
    // Another scheme (Basic) or no token after `Bearer`: hono's 400 becomes the 401 of a missing token.
    invalidAuthenticationHeader: {
      message: refuse("The Authorization header is not Bearer <token>"),
      wwwAuthenticateHeader: CHALLENGE,
    },
    invalidToken: { message: refuse("Invalid bearer token"), wwwAuthenticateHeader: `${CHALLENGE}, error="invalid_token"` },
  });
  const checkKey =
    keyHeader &&
    honoBearerAuth({
      token,
      headerName: keyHeader.name,
      prefix: "",
      invalidAuthenticationHeader: { message: refuse(`Invalid ${keyHeader.name}`) },
      invalidToken: { message: refuse(`Invalid ${keyHeader.name}`) },
    });
  const byKey = (c: Context): boolean =>
    keyHeader !== undefined && c.req.header("authorization") === undefined && c.req.header(keyHeader.name) !== undefined && keyHeader.on(c);
  const pass = async (): Promise<void> => {};
  return async (c, next) => {
    if (isPublic(c)) return next();
    try {
      await (checkKey && byKey(c) ? checkKey : check)(c, pass);
    } catch (e) {
      // hono throws its refusal; answered here, so no server's error handler turns it into its own shape.
      if (e instanceof HTTPException) return e.getResponse();
      throw e;
    }
    return next();
  };
}
