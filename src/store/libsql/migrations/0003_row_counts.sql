CREATE TABLE `row_counts` (
	`name` text PRIMARY KEY NOT NULL,
	`n` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `rollouts_start_time_idx` ON `rollouts` ("start_time" DESC);--> statement-breakpoint
-- Written by hand after drizzle-kit generate: the counts of what a database already holds, then the
-- triggers that keep them on every insert and delete (and every change of a rollout's status). Span
-- inserts are counted by the store itself, one UPDATE per insert statement (src/store/libsql/storage.ts):
-- spans come tens of thousands a second, and a trigger run per row costs 5-10 % of their write path.
INSERT INTO `row_counts` (`name`, `n`)
	SELECT 'rollouts', COUNT(*) FROM `rollouts`
	UNION ALL SELECT 'attempts', COUNT(*) FROM `attempts`
	UNION ALL SELECT 'spans', COUNT(*) FROM `spans`
	UNION ALL SELECT 'resources', COUNT(*) FROM `resources`
	UNION ALL SELECT 'workers', COUNT(*) FROM `workers`
	UNION ALL SELECT 'rollouts.status:' || `status`, COUNT(*) FROM `rollouts` GROUP BY `status`;
--> statement-breakpoint
CREATE TRIGGER `row_counts_attempts_insert` AFTER INSERT ON `attempts` BEGIN
	UPDATE `row_counts` SET `n` = `n` + 1 WHERE `name` = 'attempts';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_attempts_delete` AFTER DELETE ON `attempts` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'attempts';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_spans_delete` AFTER DELETE ON `spans` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'spans';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_resources_insert` AFTER INSERT ON `resources` BEGIN
	UPDATE `row_counts` SET `n` = `n` + 1 WHERE `name` = 'resources';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_resources_delete` AFTER DELETE ON `resources` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'resources';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_workers_insert` AFTER INSERT ON `workers` BEGIN
	UPDATE `row_counts` SET `n` = `n` + 1 WHERE `name` = 'workers';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_workers_delete` AFTER DELETE ON `workers` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'workers';
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_rollouts_insert` AFTER INSERT ON `rollouts` BEGIN
	UPDATE `row_counts` SET `n` = `n` + 1 WHERE `name` = 'rollouts';
	INSERT INTO `row_counts` (`name`, `n`) VALUES ('rollouts.status:' || NEW.`status`, 1)
		ON CONFLICT (`name`) DO UPDATE SET `n` = `n` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_rollouts_status` AFTER UPDATE OF `status` ON `rollouts` WHEN OLD.`status` IS NOT NEW.`status` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'rollouts.status:' || OLD.`status`;
	INSERT INTO `row_counts` (`name`, `n`) VALUES ('rollouts.status:' || NEW.`status`, 1)
		ON CONFLICT (`name`) DO UPDATE SET `n` = `n` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `row_counts_rollouts_delete` AFTER DELETE ON `rollouts` BEGIN
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'rollouts';
	UPDATE `row_counts` SET `n` = `n` - 1 WHERE `name` = 'rollouts.status:' || OLD.`status`;
END;