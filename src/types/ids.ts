/** Id formats shared with Agent Lightning: `ro-` + 12 hex, `at-` + 8 hex, `rs-` + 12 hex. */

// Random bytes are drawn 4 KiB at a time: one getRandomValues call per id costs more than the rest of
// an enqueue in the store's hot path.
const pool = new Uint8Array(4096);
let poolPos = pool.length;
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

function randomHex(chars: number): string {
  const n = Math.ceil(chars / 2);
  if (poolPos + n > pool.length) {
    crypto.getRandomValues(pool);
    poolPos = 0;
  }
  let out = "";
  for (let i = 0; i < n; i++) out += HEX[pool[poolPos++]!];
  return out.length === chars ? out : out.slice(0, chars);
}

export const newRolloutId = (): string => `ro-${randomHex(12)}`;
export const newAttemptId = (): string => `at-${randomHex(8)}`;
export const newResourcesId = (): string => `rs-${randomHex(12)}`;
/** OTel trace id: 32 lowercase hex characters. */
export const newTraceId = (): string => randomHex(32);
/** OTel span id: 16 lowercase hex characters. */
export const newSpanId = (): string => randomHex(16);

export const ROLLOUT_ID_PATTERN = /^ro-[0-9a-f]{12}$/;
export const ATTEMPT_ID_PATTERN = /^at-[0-9a-f]{8}$/;
export const RESOURCES_ID_PATTERN = /^rs-[0-9a-f]{12}$/;
