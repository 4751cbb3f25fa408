/** Id formats shared with Agent Lightning: `ro-` + 12 hex, `at-` + 8 hex, `rs-` + 12 hex. */

function randomHex(chars: number): string {
  const bytes = new Uint8Array(Math.ceil(chars / 2));
  crypto.getRandomValues(bytes);
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out.slice(0, chars);
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
