ALTER TABLE `attempts` ADD `watchdog_deadline` real;--> statement-breakpoint
-- Written by hand after drizzle-kit generate: the deadline of every rollout a database already holds
-- (the same sums as src/store/decisions.ts watchdogDeadline), so its timeouts keep being watched.
UPDATE `attempts` SET `watchdog_deadline` = (
	SELECT CASE
		WHEN `attempts`.`start_time` + json_extract(r.`config`, '$.timeout_seconds') IS NULL THEN
			CASE WHEN `attempts`.`status` = 'unresponsive' THEN NULL
				ELSE COALESCE(`attempts`.`last_heartbeat_time`, `attempts`.`start_time`) + json_extract(r.`config`, '$.unresponsive_seconds') END
		WHEN `attempts`.`status` = 'unresponsive' OR json_extract(r.`config`, '$.unresponsive_seconds') IS NULL THEN
			`attempts`.`start_time` + json_extract(r.`config`, '$.timeout_seconds')
		ELSE MIN(
			`attempts`.`start_time` + json_extract(r.`config`, '$.timeout_seconds'),
			COALESCE(`attempts`.`last_heartbeat_time`, `attempts`.`start_time`) + json_extract(r.`config`, '$.unresponsive_seconds'))
	END
	FROM `rollouts` AS r WHERE r.`rollout_id` = `attempts`.`rollout_id` AND r.`status` IN ('preparing', 'running')
)
WHERE `status` IN ('preparing', 'running', 'unresponsive')
	AND `sequence_id` = (SELECT MAX(b.`sequence_id`) FROM `attempts` AS b WHERE b.`rollout_id` = `attempts`.`rollout_id`);--> statement-breakpoint
CREATE INDEX `attempts_watchdog_deadline_idx` ON `attempts` (`watchdog_deadline`,`rollout_id`) WHERE "attempts"."watchdog_deadline" IS NOT NULL;
