-- Written by hand: rollouts, attempts and rollout status changes are counted by the store itself from
-- now on, as spans already were (src/store/libsql/storage.ts): their changes are held back with the rows
-- and written in one statement a commit, where these triggers ran one to two statements for every row.
-- Workers and resources (rare writes) and every delete (rows deleted by hand too) keep their triggers.
DROP TRIGGER `row_counts_rollouts_insert`;
--> statement-breakpoint
DROP TRIGGER `row_counts_rollouts_status`;
--> statement-breakpoint
DROP TRIGGER `row_counts_attempts_insert`;
