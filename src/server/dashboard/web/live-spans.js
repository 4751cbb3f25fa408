// A rollout's spans, kept up to date cheaply: spans come in sequence order, so a refresh reads only those
// after the ones already here, and everything again when that does not add up (the latest attempt
// changed, or spans arrived out of order).
import { useRef } from "preact/hooks";
import { apiAll } from "./api.js";
import { useLoad } from "./ui.js";

const PAGE = 2000;

/** `{ data: { items, total } | null, error, loading }` for the spans of `rolloutId` (one attempt, or all when `attemptId` is null). */
export function useSpans(rolloutId, attemptId, { live }) {
  const known = useRef(null);
  return useLoad(
    async () => {
      if (!rolloutId) return null;
      const key = `${rolloutId}\u0000${attemptId}`;
      const query = { rollout_id: rolloutId, attempt_id: attemptId ?? undefined };
      const had = known.current?.key === key ? known.current.data : null;
      let data = had;
      if (had) {
        const more = await apiAll("spans", query, { pageSize: PAGE, start: had.items.length });
        const sameAttempt = more.items.length === 0 || had.items.length === 0 || more.items[0].attempt_id === had.items[0].attempt_id;
        if ((attemptId !== null && !sameAttempt) || had.items.length + more.items.length !== more.total) data = null;
        else if (more.items.length > 0) data = { items: [...had.items, ...more.items], total: more.total };
      }
      data ??= await apiAll("spans", query, { pageSize: PAGE });
      known.current = { key, data };
      return data;
    },
    [rolloutId, attemptId],
    { live },
  );
}
