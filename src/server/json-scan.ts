/**
 * One pass over JSON text before `JSON.parse`, for the limits of request bodies (docs/http-api.md,
 * "Limits"): the nesting depth, and the members of any one object. Both are checked on the text because
 * their cost is in the parse itself: an object with a million keys takes seconds to parse, walk, copy and
 * write out again (a dictionary-mode object in V8), while the scan refuses it after its first
 * MAX_JSON_KEYS keys. Strings are skipped with `indexOf`, so the scan costs a fraction of the parse of a
 * span batch (bench/json-limits.ts). A body too small to pass either limit (most requests: a runner's
 * finished attempt is ~12 KB) is not scanned at all (`cannotPassLimits`).
 */

/** Most members (`"key": value` pairs) one object of a request body may have. */
export const MAX_JSON_KEYS = 10_000;

/** Which limit a text passes first, and the offset of the container that passes it. */
export interface JsonLimitBreach {
  limit: "depth" | "keys";
  at: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/** The offset of the quote that ends the string opening at `start`, or -1 if it never ends. */
function stringEnd(text: string, start: number): number {
  let j = start + 1;
  for (;;) {
    j = text.indexOf('"', j);
    if (j < 0) return -1;
    let k = j - 1;
    while (text.charCodeAt(k) === BACKSLASH) k--;
    if ((j - 1 - k) % 2 === 0) return j;
    j++;
  }
}

/** Characters of the smallest JSON object with `members` members: `{"":0,"":0}` (5 a member, and 1). */
const smallestObjectChars = (members: number): number => 5 * members + 1;

/**
 * Whether `text` is too small to pass either limit, told without reading it character by character: an
 * object with more than `maxKeys` members takes at least smallestObjectChars(maxKeys + 1) characters, and
 * a container deeper than `maxDepth` needs more than `maxDepth` opening brackets, which `indexOf` counts
 * (those inside strings too, so the count is an upper bound of the containers).
 */
function cannotPassLimits(text: string, maxDepth: number, maxKeys: number): boolean {
  if (text.length >= smallestObjectChars(maxKeys + 1)) return false;
  const objects = occurrences(text, "{", maxDepth + 1);
  return objects + occurrences(text, "[", maxDepth + 1 - objects) <= maxDepth;
}

/** How many times `char` occurs in `text`, counted up to `atMost`. */
function occurrences(text: string, char: string, atMost: number): number {
  let n = 0;
  for (let i = text.indexOf(char); i >= 0 && n < atMost; i = text.indexOf(char, i + 1)) n++;
  return n;
}

/**
 * The first limit `text` passes: containers nested deeper than `maxDepth` (the body itself is level 1),
 * or an object with more than `maxKeys` members; null when it passes neither. Malformed text may pass
 * either way: `JSON.parse` refuses it next.
 */
export function scanJsonLimits(text: string, maxDepth: number, maxKeys: number): JsonLimitBreach | null {
  if (cannotPassLimits(text, maxDepth, maxKeys)) return null;
  const members = new Int32Array(maxDepth + 1);
  const starts = new Int32Array(maxDepth + 1);
  let depth = 0;
  for (let i = 0, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = stringEnd(text, i);
      if (i < 0) return null;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth === maxDepth) return { limit: "depth", at: i };
      depth++;
      members[depth] = 0;
      starts[depth] = i;
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (--depth < 0) return null;
    } else if (c === COLON && ++members[depth]! > maxKeys) {
      // Outside strings a colon only ever ends an object's key.
      return { limit: "keys", at: starts[depth]! };
    }
  }
  return null;
}

/**
 * The path (keys and array indexes) of the value that starts at `offset`, for naming a refused container:
 * the text before it is read once more, keeping the key or index each open container is at.
 */
export function jsonPathAt(text: string, offset: number): (string | number)[] {
  const isObject: boolean[] = [];
  const path: (string | number)[] = [];
  for (let i = 0; i < offset; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      if (end < 0) break;
      // In an object the last string read before a container opens is that member's key (a string value ends its member).
      if (isObject.at(-1) === true) path[path.length - 1] = JSON.parse(text.slice(i, end + 1)) as string;
      i = end;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      isObject.push(c === OPEN_OBJECT);
      path.push(c === OPEN_OBJECT ? "" : 0);
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      isObject.pop();
      path.pop();
    } else if (c === COMMA && isObject.at(-1) === false) {
      path[path.length - 1] = (path.at(-1) as number) + 1;
    }
  }
  return path;
}
