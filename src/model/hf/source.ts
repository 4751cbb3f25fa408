/**
 * Where a model's files come from: a folder (Node, Deno, Bun, through the platform's file access) or a
 * map of file names to bytes, Blobs or URLs (browsers, tests, custom storage). Large files are read
 * in ranges, one tensor at a time, so a model is never held twice in memory.
 */
import { platform, type FileReader } from "../../platform/index.ts";
import { HfFormatError, ModelFolderError } from "./errors.ts";

/** One file of a map source: bytes, a Blob (read in slices) or a URL (fetched whole, once). */
export type FileSource = ArrayBuffer | Uint8Array | Blob | URL | string;

/** A folder path, or file name → contents. */
export type ModelSource = string | Readonly<Record<string, FileSource>>;

export interface ModelFiles {
  /** How the source is named in messages (the folder path, or "files"). */
  readonly label: string;
  has(name: string): Promise<boolean>;
  /** A file's text; a missing file is a HfFormatError naming it. */
  readText(name: string): Promise<string>;
  open(name: string): Promise<FileReader>;
}

function join(dir: string, name: string): string {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

function bytesReader(bytes: Uint8Array): FileReader {
  return {
    size: bytes.length,
    read: async (offset, length) => bytes.slice(offset, Math.min(bytes.length, offset + length)),
    async readInto(offset, target) {
      const part = bytes.subarray(offset, Math.min(bytes.length, offset + target.length));
      target.set(part);
      return part.length;
    },
    close: async () => undefined,
  };
}

function blobReader(blob: Blob): FileReader {
  const read = async (offset: number, length: number): Promise<Uint8Array> =>
    new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
  return {
    size: blob.size,
    read,
    async readInto(offset, target) {
      const part = await read(offset, target.length);
      target.set(part);
      return part.length;
    },
    close: async () => undefined,
  };
}

function folderFiles(dir: string, what: string): ModelFiles {
  const files = platform.files();
  // A file that cannot be read: the folder missing or a file (named as such), else the file missing in it.
  const notRead = async (name: string, e: unknown): Promise<Error> => {
    const code = (e as { code?: string }).code;
    const expected = `expected ${what} holding ${name}`;
    if (code === "ENOTDIR") return new ModelFolderError(dir, `${dir} is a file, not a folder: ${expected}`);
    if (code !== "ENOENT") return e as Error;
    if (!(await files.exists(dir))) return new ModelFolderError(dir, `${dir} does not exist: ${expected}`);
    return new HfFormatError(name, null, `no such file in ${dir}`);
  };
  return {
    label: dir,
    has: (name) => files.exists(join(dir, name)),
    async readText(name) {
      try {
        return new TextDecoder().decode(await files.readFile(join(dir, name)));
      } catch (e) {
        throw await notRead(name, e);
      }
    },
    async open(name) {
      try {
        return await files.open(join(dir, name));
      } catch (e) {
        throw await notRead(name, e);
      }
    },
  };
}

function mapFiles(map: Readonly<Record<string, FileSource>>): ModelFiles {
  const fetched = new Map<string, Promise<Uint8Array>>();
  const get = (name: string): FileSource => {
    const f = map[name];
    if (f === undefined) throw new HfFormatError(name, null, "not among the given files");
    return f;
  };
  const download = (name: string, url: string | URL): Promise<Uint8Array> => {
    let p = fetched.get(name);
    if (!p) {
      p = (async () => {
        let r: Response;
        try {
          r = await fetch(url);
        } catch (e) {
          throw new HfFormatError(name, null, `cannot fetch ${JSON.stringify(String(url).slice(0, 200))}: ${(e as Error).message}`);
        }
        if (!r.ok) throw new HfFormatError(name, null, `fetching ${String(url)} answered ${r.status}`);
        return new Uint8Array(await r.arrayBuffer());
      })();
      fetched.set(name, p);
    }
    return p;
  };
  const reader = async (name: string): Promise<FileReader> => {
    const f = get(name);
    if (f instanceof Uint8Array) return bytesReader(f);
    if (f instanceof ArrayBuffer) return bytesReader(new Uint8Array(f));
    if (typeof Blob !== "undefined" && f instanceof Blob) return blobReader(f);
    return bytesReader(await download(name, f as string | URL));
  };
  return {
    label: "files",
    has: async (name) => map[name] !== undefined,
    async readText(name) {
      const r = await reader(name);
      return new TextDecoder().decode(await r.read(0, r.size));
    },
    open: reader,
  };
}

/** The files of `source`; `what` names the kind of folder in messages ("a Hugging Face model folder"). */
export function modelFiles(source: ModelSource, what = "a folder"): ModelFiles {
  return typeof source === "string" ? folderFiles(source, what) : mapFiles(source);
}

/** Parses a JSON file of the source; malformed JSON is a HfFormatError naming the file. */
export async function readJson(files: ModelFiles, name: string): Promise<Record<string, unknown>> {
  const text = await files.readText(name);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new HfFormatError(name, null, `not valid JSON: ${(e as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new HfFormatError(name, null, "not a JSON object");
  return value as Record<string, unknown>;
}
