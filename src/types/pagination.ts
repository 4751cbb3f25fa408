import { z } from "zod";

export interface PaginatedResult<T> {
  items: T[];
  /** -1 means unlimited. */
  limit: number;
  offset: number;
  /** Matches before pagination. */
  total: number;
}

export const paginatedResult = <T extends z.ZodType>(item: T) =>
  z.object({ items: z.array(item), limit: z.number().int(), offset: z.number().int(), total: z.number().int() });

/** Applies `limit` (-1 = all, 0 = none) and `offset` to already filtered and sorted items. */
export function paginate<T>(items: T[], limit = -1, offset = 0): PaginatedResult<T> {
  const start = Math.max(0, offset);
  const page = limit < 0 ? items.slice(start) : items.slice(start, start + limit);
  return { items: page, limit, offset, total: items.length };
}
