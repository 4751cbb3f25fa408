/**
 * What a server without a token refuses from web pages (docs/server.md, "What a server without a token
 * trusts"): the store server, the policy server and the LLM proxy install this one middleware.
 *
 * - The `Host` allow-list, against DNS rebinding (as Jupyter and Vite do): a page whose name is made to
 *   resolve to 127.0.0.1 reaches the server under its own name, as a same-origin page, so the browser's
 *   own checks do not apply. Its requests still carry that name in `Host`; a server bound to loopback
 *   answers only `localhost`, `*.localhost`, IP addresses, its bind address and the names allowed.
 *   An IP address cannot be rebound, so every IP literal is safe to answer.
 * - Cross-site writes: a page on another origin can send a POST without a preflight (`mode: "no-cors"`,
 *   a form); the server cannot stop the request, only refuse it. Browsers mark such requests with
 *   `Origin` and `Sec-Fetch-Site`; writes marked cross-site are refused unless the origin is allowed
 *   by CORS. `Sec-Fetch-Site` ignores ports (a page on 127.0.0.1:8080 is `same-site` to 127.0.0.1:4747),
 *   so only `same-origin` and `none` (typed by the user) pass.
 *
 * With a token neither applies: a page cannot send the token without the user's help. An explicit list
 * of allowed hosts is enforced whatever the token and the bind address.
 */
import type { MiddlewareHandler } from "hono";
import { ValidationError } from "../types/index.ts";
import { HttpProblem } from "./errors.ts";

export interface BrowserGuardOptions {
  /** The server's bearer token; with one, only an explicit `allowedHosts` list is enforced. */
  token: string | null;
  /** The address the server listens on. Default 127.0.0.1 (loopback). */
  bindAddress?: string;
  /**
   * Host names answered besides `localhost`, `*.localhost`, IP addresses and the bind address; `.example.com`
   * allows the name and its subdomains, `*` any name. Giving any turns the check on for every bind address.
   */
  allowedHosts?: readonly string[];
  /** Origins allowed by CORS (normalised: `["*"]` for any); their writes are not cross-site refusals. */
  corsOrigins?: readonly string[];
  /** Whether the server has a `--cors-origin` option to name in the refusal. */
  corsOption?: boolean;
}

/** `Sec-Fetch-Site` values of requests made by the server's own pages or typed by the user. */
const SAME_ORIGIN_FETCH = new Set(["same-origin", "none"]);
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** A `Host` header or bind address as a URL parses it (lowercase, IPv6 in brackets, default port dropped); null when it is not one. */
function parseHost(hostAndPort: string): URL | null {
  const bareIpv6 = !hostAndPort.startsWith("[") && hostAndPort.split(":").length > 2;
  try {
    const url = new URL(`http://${bareIpv6 ? `[${hostAndPort}]` : hostAndPort}`);
    return url.username || url.password || url.pathname !== "/" || url.search || url.hash ? null : url;
  } catch {
    return null;
  }
}

/** The hostname of a `Host` header or bind address, without a trailing dot; null when it is not one. */
const hostnameOf = (hostAndPort: string): string | null => parseHost(hostAndPort)?.hostname.replace(/\.$/, "") ?? null;

/** An IP literal, as the URL parser writes one (every numeric form of IPv4 becomes a dotted quad). */
const isIpLiteral = (hostname: string): boolean => hostname.startsWith("[") || /^\d{1,3}(?:\.\d{1,3}){3}$/.test(hostname);

const isLoopbackName = (hostname: string): boolean => hostname === "localhost" || hostname.endsWith(".localhost");

/** Whether a bind address only takes connections from this machine. */
export function isLoopbackAddress(address: string): boolean {
  const hostname = hostnameOf(address);
  if (hostname === null) return false;
  return isLoopbackName(hostname) || /^127\.\d+\.\d+\.\d+$/.test(hostname) || hostname === "[::1]";
}

/** One `--allowed-host` entry, normalised; a port, a scheme, a path or an empty name is refused. */
export function parseAllowedHost(entry: string): string {
  const raw = entry.trim();
  if (raw === "*") return "*";
  const subdomains = raw.startsWith(".");
  const given = subdomains ? raw.slice(1) : raw;
  // A port (even the default one, which the URL drops) is a mistake: Host is compared without it.
  const hasPort = given.startsWith("[") ? given.includes("]:") : given.split(":").length === 2;
  const name = hostnameOf(given) ?? "";
  if (hasPort || name === "")
    throw new ValidationError(
      `allowed host ${JSON.stringify(entry)} is not a host name: give the name alone (example.com; .example.com for its subdomains too; * for any name), without a scheme, port or path`,
      ["allowedHosts"],
    );
  return subdomains ? `.${name}` : name;
}

/** Whether `Origin` names this server itself: same scheme-less host and port as the request's `Host`. */
function isOwnOrigin(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  try {
    const o = new URL(origin);
    return new URL(`${o.protocol}//${host}`).host === o.host;
  } catch {
    return false;
  }
}

function hostNotAllowed(host: string): HttpProblem {
  const name = hostnameOf(host);
  const why =
    "this server answers only localhost, IP addresses, its bind address and the names given with --allowed-host (allowedHosts in code), so that a web page cannot reach it through DNS rebinding";
  return new HttpProblem(
    403,
    "HostNotAllowed",
    name === null
      ? `Host '${host}' is not a host name: ${why}`
      : `Host '${host}' is not allowed: ${why}. If '${name}' is a name of this server, start it with --allowed-host ${name}`,
  );
}

/**
 * The middleware, or null when it has nothing to check. It throws `HttpProblem`s (403 `HostNotAllowed`,
 * 403 `CrossSiteRequest`), which each server's error handler writes in its own error shape.
 */
export function browserGuard(options: BrowserGuardOptions): MiddlewareHandler | null {
  const tokenless = options.token === null;
  const bind = options.bindAddress ?? "127.0.0.1";
  const listed = (options.allowedHosts ?? []).map(parseAllowedHost);
  const anyHost = listed.includes("*");
  const checkHost = !anyHost && (listed.length > 0 || (tokenless && isLoopbackAddress(bind)));
  if (!checkHost && !tokenless) return null;
  const bindName = hostnameOf(bind);
  const origins = options.corsOrigins ?? [];
  const anyOrigin = origins.includes("*");

  const hostAllowed = (header: string | undefined): boolean => {
    // Browsers always send Host; a request without one is not a page's.
    if (header === undefined) return true;
    const name = hostnameOf(header);
    if (name === null) return false;
    if (isLoopbackName(name) || isIpLiteral(name) || name === bindName) return true;
    return listed.some((h) => (h.startsWith(".") ? name === h.slice(1) || name.endsWith(h) : name === h));
  };

  return async (c, next) => {
    const host = c.req.header("host");
    if (checkHost && !hostAllowed(host)) throw hostNotAllowed(host!);
    if (!tokenless || SAFE_METHODS.has(c.req.method)) return next();
    const origin = c.req.header("origin");
    if (origin !== undefined && (anyOrigin || origins.includes(origin))) return next();
    const site = c.req.header("sec-fetch-site");
    const crossSite =
      (site !== undefined && !SAME_ORIGIN_FETCH.has(site.toLowerCase())) || (origin !== undefined && !isOwnOrigin(origin, host));
    if (!crossSite) return next();
    const cors = options.corsOption ?? false;
    throw new HttpProblem(
      403,
      "CrossSiteRequest",
      `Refused a ${c.req.method} from another site (Origin: ${origin ?? "none"}, Sec-Fetch-Site: ${site ?? "none"}): without a token this server takes writes from web pages on its own origin only${cors ? " and on the origins given with --cors-origin (corsOrigins in code)" : ""}. Set a token${cors ? ", or allow the page's origin with --cors-origin" : ""}`,
    );
  };
}
