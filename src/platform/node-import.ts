/**
 * Importing a user's module on Node, TypeScript included. Node 20 has no loader for `.ts` files (newer
 * Nodes strip types themselves): such a module goes through tsx's API when tsx is installed where this
 * package can resolve it; otherwise the error says how to make it loadable.
 */
import process from "node:process";
import { fileURLToPath } from "node:url";

const TYPESCRIPT = /\.[cm]?tsx?$/;

interface TsxApi {
  tsImport(specifier: string, parentURL: string): Promise<Record<string, unknown>>;
}

// a variable, so that type checkers and bundlers leave the optional package alone
const TSX_API = "tsx/esm/api";

/** tsx's ESM API as this package resolves it (a project that installs tsx has it beside this package), or null. */
async function tsxApi(): Promise<TsxApi | null> {
  try {
    return (await import(/* @vite-ignore */ TSX_API)) as TsxApi;
  } catch (e) {
    if ((e as { code?: string }).code === "ERR_MODULE_NOT_FOUND" && /'tsx'/.test((e as Error).message)) return null;
    throw e;
  }
}

export async function importOnNode(url: string): Promise<Record<string, unknown>> {
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (e) {
    if ((e as { code?: string }).code !== "ERR_UNKNOWN_FILE_EXTENSION" || !TYPESCRIPT.test(new URL(url).pathname)) throw e;
  }
  const tsx = await tsxApi();
  if (tsx === null)
    throw new Error(
      `Node ${process.version} cannot load the TypeScript file ${fileURLToPath(url)} by itself: install tsx (npm i -D tsx) ` +
        "and it is loaded through tsx, or run the command under tsx (npx tsx ...)",
    );
  return tsx.tsImport(url, import.meta.url);
}
