CREATE TABLE `attempts` (
	`rollout_id` text NOT NULL,
	`attempt_id` text NOT NULL,
	`sequence_id` integer NOT NULL,
	`start_time` real NOT NULL,
	`end_time` real,
	`status` text NOT NULL,
	`worker_id` text,
	`last_heartbeat_time` real,
	`metadata` text,
	PRIMARY KEY(`rollout_id`, `attempt_id`)
);
--> statement-breakpoint
CREATE UNIQUE INDEX `attempts_rollout_sequence_idx` ON `attempts` (`rollout_id`,`sequence_id`);--> statement-breakpoint
CREATE TABLE `queue` (
	`id` integer PRIMARY KEY NOT NULL,
	`rollout_id` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `queue_rollout_idx` ON `queue` (`rollout_id`);--> statement-breakpoint
CREATE TABLE `resources` (
	`resources_id` text PRIMARY KEY NOT NULL,
	`create_time` real NOT NULL,
	`update_time` real NOT NULL,
	`version` integer NOT NULL,
	`resources` text NOT NULL,
	`write_order` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `resources_write_order_idx` ON `resources` (`write_order`);--> statement-breakpoint
CREATE TABLE `rollouts` (
	`rollout_id` text PRIMARY KEY NOT NULL,
	`input` text NOT NULL,
	`start_time` real NOT NULL,
	`end_time` real,
	`mode` text,
	`resources_id` text,
	`status` text NOT NULL,
	`config` text NOT NULL,
	`metadata` text
);
--> statement-breakpoint
CREATE INDEX `rollouts_status_idx` ON `rollouts` (`status`);--> statement-breakpoint
CREATE TABLE `span_sequences` (
	`rollout_id` text PRIMARY KEY NOT NULL,
	`value` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `spans` (
	`id` integer PRIMARY KEY NOT NULL,
	`rollout_id` text NOT NULL,
	`attempt_id` text NOT NULL,
	`sequence_id` integer NOT NULL,
	`trace_id` text NOT NULL,
	`span_id` text NOT NULL,
	`parent_id` text,
	`name` text NOT NULL,
	`start_time` real,
	`end_time` real,
	`body` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `spans_key_idx` ON `spans` (`rollout_id`,`attempt_id`,`span_id`);--> statement-breakpoint
CREATE TABLE `workers` (
	`worker_id` text PRIMARY KEY NOT NULL,
	`status` text DEFAULT 'unknown' NOT NULL,
	`heartbeat_stats` text,
	`last_heartbeat_time` real,
	`last_dequeue_time` real,
	`last_busy_time` real,
	`last_idle_time` real,
	`current_rollout_id` text,
	`current_attempt_id` text
);
