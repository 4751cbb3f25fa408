/** Id formats shared with Agent Lightning: `ro-` + 12 hex, `at-` + 8 hex, `rs-` + 12 hex. */

// Random bytes are drawn 4 KiB at a time: one getRandomValues call per id costs more than the rest of
// an enqueue in the store's hot path.
const pool = new Uint8Array(4096);
let poolPos = pool.length;
const HEX_CODES = Array.from("0123456789abcdef", (c) => c.charCodeAt(0));
/** One reusable char-code buffer per id length. */
const codeBuffers: number[][] = [];

/**
 * `prefix` + `chars` random lowercase hex digits, built by one String.fromCharCode: a flat string.
 * (Appending two digits at a time builds a tree of string pieces for ids of 13+ characters, which
 * costs several times the id's size in memory for as long as a stored span keeps it.)
 */
function randomHex(chars: number, prefix = ""): string {
  const n = Math.ceil(chars / 2);
  if (poolPos + n > pool.length) {
    crypto.getRandomValues(pool);
    poolPos = 0;
  }
  const p = prefix.length;
  const codes = (codeBuffers[p + chars] ??= new Array<number>(p + chars).fill(0));
  for (let i = 0; i < p; i++) codes[i] = prefix.charCodeAt(i);
  for (let i = 0; i < chars; i += 2) {
    const b = pool[poolPos++]!;
    codes[p + i] = HEX_CODES[b >> 4]!;
    if (i + 1 < chars) codes[p + i + 1] = HEX_CODES[b & 15]!;
  }
  return String.fromCharCode.apply(null, codes);
}

/**
 * Rollout ids count up from a random per-process start: still `ro-` + 12 hex and unique (two processes
 * collide only if their starts fall within the number of ids they make, ~1e-8 for a million each), but
 * successive ids sort next to each other. Every libSQL index that leads with rollout_id (spans, attempts,
 * rollouts) then inserts into the few pages at the end of one region instead of a random page per row,
 * which is most of what a file store's insert costs.
 */
const ROLLOUT_ID_SPACE = 2 ** 48;
let nextRolloutNumber = -1;
export const newRolloutId = (): string => {
  if (nextRolloutNumber < 0) {
    const start = randomHex(12);
    nextRolloutNumber = Number.parseInt(start, 16);
  }
  const id = nextRolloutNumber;
  nextRolloutNumber = (nextRolloutNumber + 1) % ROLLOUT_ID_SPACE;
  return `ro-${id.toString(16).padStart(12, "0")}`;
};
export const newAttemptId = (): string => randomHex(8, "at-");
export const newResourcesId = (): string => randomHex(12, "rs-");
/** OTel trace id: 32 lowercase hex characters. */
export const newTraceId = (): string => randomHex(32);
/** OTel span id: 16 lowercase hex characters. */
export const newSpanId = (): string => randomHex(16);

export const ROLLOUT_ID_PATTERN = /^ro-[0-9a-f]{12}$/;
export const ATTEMPT_ID_PATTERN = /^at-[0-9a-f]{8}$/;
export const RESOURCES_ID_PATTERN = /^rs-[0-9a-f]{12}$/;
