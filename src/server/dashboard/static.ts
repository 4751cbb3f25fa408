/**
 * The dashboard's files, served from the generated module (assets.generated.ts): index.html at `/`, the
 * rest under `/dashboard/`. They hold no store data and no token, so they are served without the bearer
 * token; every API call the page makes needs it.
 */
import type { Context, Hono } from "hono";
import { DASHBOARD_ASSETS, IMPORT_MAP_CSP_HASH, type DashboardAsset } from "./assets.generated.ts";

export const DASHBOARD_PREFIX = "/dashboard/";

/** Scripts only from this origin plus the inline import map; no plugins, frames or form posts elsewhere. */
const CSP = [
  "default-src 'self'",
  `script-src 'self' '${IMPORT_MAP_CSP_HASH}'`,
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'none'",
].join("; ");

/** The asset a GET of `path` serves, or null. */
export function dashboardAssetFor(path: string): DashboardAsset | null {
  if (path === "/" || path === "/index.html") return DASHBOARD_ASSETS["index.html"] ?? null;
  if (!path.startsWith(DASHBOARD_PREFIX)) return null;
  const name = path.slice(DASHBOARD_PREFIX.length);
  return Object.hasOwn(DASHBOARD_ASSETS, name) && name !== "index.html" ? DASHBOARD_ASSETS[name]! : null;
}

/** Whether a request is for one of the dashboard's files (served without the token). */
export const isDashboardAsset = (method: string, path: string): boolean =>
  (method === "GET" || method === "HEAD") && dashboardAssetFor(path) !== null;

function serve(c: Context, asset: DashboardAsset): Response {
  const headers: Record<string, string> = {
    "content-type": asset.type,
    etag: asset.etag,
    // Revalidated on every load (a 304 when unchanged), so a new server version is picked up at once.
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
  };
  if (asset.type.startsWith("text/html")) headers["content-security-policy"] = CSP;
  const match = c.req.header("if-none-match");
  if (match?.split(",").some((t) => t.trim().replace(/^W\//, "") === asset.etag)) return c.body(null, 304, headers);
  return c.body(asset.body, 200, headers);
}

export function registerDashboardFiles(app: Hono): void {
  app.get("/", (c) => serve(c, dashboardAssetFor("/")!));
  app.get("/index.html", (c) => serve(c, dashboardAssetFor("/")!));
  app.get(`${DASHBOARD_PREFIX}*`, (c) => {
    const asset = dashboardAssetFor(c.req.path);
    return asset ? serve(c, asset) : c.notFound();
  });
}
