-- Normalised description of a migrated pgtasks schema ({schema} = its name).
-- Regenerate with: python3 scripts/dump-schema
column all_jobs.id bigint
column all_jobs.task_name text
column all_jobs.queue text
column all_jobs.priority integer
column all_jobs.args jsonb
column all_jobs.kwargs jsonb
column all_jobs.status text
column all_jobs.attempts integer
column all_jobs.max_attempts integer
column all_jobs.run_at timestamp with time zone
column all_jobs.locked_at timestamp with time zone
column all_jobs.locked_by bigint
column all_jobs.last_error text
column all_jobs.result jsonb
column all_jobs.idempotency_key text
column all_jobs.created_at timestamp with time zone
column all_jobs.updated_at timestamp with time zone
column all_jobs.finished_at timestamp with time zone
column all_jobs.cancel_requested boolean
column all_jobs.meta jsonb
column all_jobs.started_at timestamp with time zone
column all_jobs.attempt_errors jsonb
column all_jobs.limit_groups text[]
column all_jobs.limit_key text
column all_jobs.unique_key text
column all_jobs.unique_window tstzrange
column all_jobs.workflow_id bigint
column all_jobs.workflow_step text
column all_jobs.next_ids bigint[]
column all_jobs.prev_ids bigint[]
column all_jobs.waiting_for integer
column all_jobs.input_mode text
column audit_log.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column audit_log.at timestamp with time zone NOT NULL DEFAULT now()
column audit_log.actor text NOT NULL
column audit_log.action text NOT NULL
column audit_log.target text NOT NULL
column audit_log.before jsonb
column audit_log.after jsonb
column counters.name text NOT NULL
column counters.value bigint NOT NULL
column instance.singleton boolean NOT NULL DEFAULT true
column instance.store_no integer NOT NULL DEFAULT 0
column instance.uid uuid NOT NULL DEFAULT gen_random_uuid()
column instance.created_at timestamp with time zone NOT NULL DEFAULT now()
column job_events.id bigint NOT NULL DEFAULT nextval('{schema}.job_events_id_seq'::regclass)
column job_events.key text NOT NULL
column job_events.payload jsonb
column job_events.created_at timestamp with time zone NOT NULL DEFAULT now()
column job_keys.job_id bigint NOT NULL
column job_keys.idempotency_key text
column job_keys.unique_key text
column job_keys.unique_window tstzrange
column job_steps.job_id bigint NOT NULL
column job_steps.name text NOT NULL
column job_steps.occurrence integer NOT NULL
column job_steps.position integer NOT NULL
column job_steps.status text NOT NULL
column job_steps.result jsonb
column job_steps.error text
column job_steps.attempt integer NOT NULL
column job_steps.worker_id bigint
column job_steps.started_at timestamp with time zone
column job_steps.finished_at timestamp with time zone NOT NULL DEFAULT now()
column job_waits.job_id bigint NOT NULL
column job_waits.key text NOT NULL
column job_waits.after_id bigint NOT NULL DEFAULT 0
column job_waits.deadline timestamp with time zone
column job_waits.since timestamp with time zone NOT NULL DEFAULT now()
column jobs.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column jobs.task_name text NOT NULL
column jobs.queue text NOT NULL
column jobs.priority integer NOT NULL DEFAULT 0
column jobs.args jsonb NOT NULL
column jobs.kwargs jsonb NOT NULL
column jobs.status text NOT NULL DEFAULT 'pending'::text
column jobs.attempts integer NOT NULL DEFAULT 0
column jobs.max_attempts integer NOT NULL
column jobs.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.locked_at timestamp with time zone
column jobs.locked_by bigint
column jobs.last_error text
column jobs.result jsonb
column jobs.idempotency_key text
column jobs.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.finished_at timestamp with time zone
column jobs.cancel_requested boolean NOT NULL DEFAULT false
column jobs.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs.started_at timestamp with time zone
column jobs.attempt_errors jsonb
column jobs.limit_groups text[]
column jobs.limit_key text
column jobs.unique_key text
column jobs.unique_window tstzrange
column jobs.workflow_id bigint
column jobs.workflow_step text
column jobs.next_ids bigint[]
column jobs.prev_ids bigint[]
column jobs.waiting_for integer
column jobs.input_mode text
column jobs_history.id bigint NOT NULL
column jobs_history.task_name text NOT NULL
column jobs_history.queue text NOT NULL
column jobs_history.priority integer NOT NULL DEFAULT 0
column jobs_history.args jsonb NOT NULL
column jobs_history.kwargs jsonb NOT NULL
column jobs_history.status text NOT NULL DEFAULT 'pending'::text
column jobs_history.attempts integer NOT NULL DEFAULT 0
column jobs_history.max_attempts integer NOT NULL
column jobs_history.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history.locked_at timestamp with time zone
column jobs_history.locked_by bigint
column jobs_history.last_error text
column jobs_history.result jsonb
column jobs_history.idempotency_key text
column jobs_history.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history.finished_at timestamp with time zone
column jobs_history.cancel_requested boolean NOT NULL DEFAULT false
column jobs_history.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs_history.started_at timestamp with time zone
column jobs_history.attempt_errors jsonb
column jobs_history.limit_groups text[]
column jobs_history.limit_key text
column jobs_history.unique_key text
column jobs_history.unique_window tstzrange
column jobs_history.workflow_id bigint
column jobs_history.workflow_step text
column jobs_history.next_ids bigint[]
column jobs_history.prev_ids bigint[]
column jobs_history.waiting_for integer
column jobs_history.input_mode text
column jobs_history_done.id bigint NOT NULL
column jobs_history_done.task_name text NOT NULL
column jobs_history_done.queue text NOT NULL
column jobs_history_done.priority integer NOT NULL DEFAULT 0
column jobs_history_done.args jsonb NOT NULL
column jobs_history_done.kwargs jsonb NOT NULL
column jobs_history_done.status text NOT NULL DEFAULT 'pending'::text
column jobs_history_done.attempts integer NOT NULL DEFAULT 0
column jobs_history_done.max_attempts integer NOT NULL
column jobs_history_done.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done.locked_at timestamp with time zone
column jobs_history_done.locked_by bigint
column jobs_history_done.last_error text
column jobs_history_done.result jsonb
column jobs_history_done.idempotency_key text
column jobs_history_done.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done.finished_at timestamp with time zone
column jobs_history_done.cancel_requested boolean NOT NULL DEFAULT false
column jobs_history_done.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs_history_done.started_at timestamp with time zone
column jobs_history_done.attempt_errors jsonb
column jobs_history_done.limit_groups text[]
column jobs_history_done.limit_key text
column jobs_history_done.unique_key text
column jobs_history_done.unique_window tstzrange
column jobs_history_done.workflow_id bigint
column jobs_history_done.workflow_step text
column jobs_history_done.next_ids bigint[]
column jobs_history_done.prev_ids bigint[]
column jobs_history_done.waiting_for integer
column jobs_history_done.input_mode text
column jobs_history_done_default.id bigint NOT NULL
column jobs_history_done_default.task_name text NOT NULL
column jobs_history_done_default.queue text NOT NULL
column jobs_history_done_default.priority integer NOT NULL DEFAULT 0
column jobs_history_done_default.args jsonb NOT NULL
column jobs_history_done_default.kwargs jsonb NOT NULL
column jobs_history_done_default.status text NOT NULL DEFAULT 'pending'::text
column jobs_history_done_default.attempts integer NOT NULL DEFAULT 0
column jobs_history_done_default.max_attempts integer NOT NULL
column jobs_history_done_default.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done_default.locked_at timestamp with time zone
column jobs_history_done_default.locked_by bigint
column jobs_history_done_default.last_error text
column jobs_history_done_default.result jsonb
column jobs_history_done_default.idempotency_key text
column jobs_history_done_default.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done_default.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_done_default.finished_at timestamp with time zone
column jobs_history_done_default.cancel_requested boolean NOT NULL DEFAULT false
column jobs_history_done_default.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs_history_done_default.started_at timestamp with time zone
column jobs_history_done_default.attempt_errors jsonb
column jobs_history_done_default.limit_groups text[]
column jobs_history_done_default.limit_key text
column jobs_history_done_default.unique_key text
column jobs_history_done_default.unique_window tstzrange
column jobs_history_done_default.workflow_id bigint
column jobs_history_done_default.workflow_step text
column jobs_history_done_default.next_ids bigint[]
column jobs_history_done_default.prev_ids bigint[]
column jobs_history_done_default.waiting_for integer
column jobs_history_done_default.input_mode text
column jobs_history_failed.id bigint NOT NULL
column jobs_history_failed.task_name text NOT NULL
column jobs_history_failed.queue text NOT NULL
column jobs_history_failed.priority integer NOT NULL DEFAULT 0
column jobs_history_failed.args jsonb NOT NULL
column jobs_history_failed.kwargs jsonb NOT NULL
column jobs_history_failed.status text NOT NULL DEFAULT 'pending'::text
column jobs_history_failed.attempts integer NOT NULL DEFAULT 0
column jobs_history_failed.max_attempts integer NOT NULL
column jobs_history_failed.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed.locked_at timestamp with time zone
column jobs_history_failed.locked_by bigint
column jobs_history_failed.last_error text
column jobs_history_failed.result jsonb
column jobs_history_failed.idempotency_key text
column jobs_history_failed.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed.finished_at timestamp with time zone
column jobs_history_failed.cancel_requested boolean NOT NULL DEFAULT false
column jobs_history_failed.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs_history_failed.started_at timestamp with time zone
column jobs_history_failed.attempt_errors jsonb
column jobs_history_failed.limit_groups text[]
column jobs_history_failed.limit_key text
column jobs_history_failed.unique_key text
column jobs_history_failed.unique_window tstzrange
column jobs_history_failed.workflow_id bigint
column jobs_history_failed.workflow_step text
column jobs_history_failed.next_ids bigint[]
column jobs_history_failed.prev_ids bigint[]
column jobs_history_failed.waiting_for integer
column jobs_history_failed.input_mode text
column jobs_history_failed_default.id bigint NOT NULL
column jobs_history_failed_default.task_name text NOT NULL
column jobs_history_failed_default.queue text NOT NULL
column jobs_history_failed_default.priority integer NOT NULL DEFAULT 0
column jobs_history_failed_default.args jsonb NOT NULL
column jobs_history_failed_default.kwargs jsonb NOT NULL
column jobs_history_failed_default.status text NOT NULL DEFAULT 'pending'::text
column jobs_history_failed_default.attempts integer NOT NULL DEFAULT 0
column jobs_history_failed_default.max_attempts integer NOT NULL
column jobs_history_failed_default.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed_default.locked_at timestamp with time zone
column jobs_history_failed_default.locked_by bigint
column jobs_history_failed_default.last_error text
column jobs_history_failed_default.result jsonb
column jobs_history_failed_default.idempotency_key text
column jobs_history_failed_default.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed_default.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs_history_failed_default.finished_at timestamp with time zone
column jobs_history_failed_default.cancel_requested boolean NOT NULL DEFAULT false
column jobs_history_failed_default.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs_history_failed_default.started_at timestamp with time zone
column jobs_history_failed_default.attempt_errors jsonb
column jobs_history_failed_default.limit_groups text[]
column jobs_history_failed_default.limit_key text
column jobs_history_failed_default.unique_key text
column jobs_history_failed_default.unique_window tstzrange
column jobs_history_failed_default.workflow_id bigint
column jobs_history_failed_default.workflow_step text
column jobs_history_failed_default.next_ids bigint[]
column jobs_history_failed_default.prev_ids bigint[]
column jobs_history_failed_default.waiting_for integer
column jobs_history_failed_default.input_mode text
column limits.name text NOT NULL
column limits.concurrency integer
column limits.rate_count integer
column limits.rate_period double precision
column limits.burst double precision NOT NULL DEFAULT 1
column limits.tokens double precision NOT NULL DEFAULT 1
column limits.refilled_at timestamp with time zone NOT NULL DEFAULT now()
column limits.updated_at timestamp with time zone NOT NULL DEFAULT now()
column limits.declared boolean NOT NULL DEFAULT true
column limits.declared_concurrency integer
column limits.declared_rate_count integer
column limits.declared_rate_period double precision
column limits.declared_burst double precision
column limits.overridden_by text
column limits.overridden_at timestamp with time zone
column limits.paused_concurrency integer
column limits.paused boolean NOT NULL DEFAULT false
column migration_steps.version integer NOT NULL
column migration_steps.step integer NOT NULL
column migration_steps.applied_at timestamp with time zone NOT NULL DEFAULT now()
column migrations.version integer NOT NULL
column migrations.name text NOT NULL
column migrations.applied_at timestamp with time zone NOT NULL DEFAULT now()
column notify_gates.queue text NOT NULL
column notify_gates.notified_at timestamp with time zone NOT NULL
column periodic.name text NOT NULL
column periodic.processed_until timestamp with time zone NOT NULL
column periodic.last_tick timestamp with time zone
column periodic.last_job_id bigint
column periodic.created_at timestamp with time zone NOT NULL DEFAULT now()
column periodic.updated_at timestamp with time zone NOT NULL DEFAULT now()
column queue_pauses.queue text NOT NULL
column queue_pauses.paused_at timestamp with time zone NOT NULL DEFAULT now()
column sequence_holds.sequence_key text NOT NULL
column sequence_holds.job_id bigint NOT NULL
column sequence_holds.held_at timestamp with time zone NOT NULL DEFAULT now()
column worker_history.worker_id bigint NOT NULL
column worker_history.hostname text NOT NULL
column worker_history.pid integer NOT NULL
column worker_history.queues text[]
column worker_history.concurrency integer NOT NULL
column worker_history.started_at timestamp with time zone NOT NULL
column worker_history.heartbeat_at timestamp with time zone NOT NULL
column worker_history.removed_at timestamp with time zone NOT NULL DEFAULT now()
column workers.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column workers.hostname text NOT NULL
column workers.pid integer NOT NULL
column workers.queues text[]
column workers.concurrency integer NOT NULL
column workers.started_at timestamp with time zone NOT NULL DEFAULT now()
column workers.heartbeat_at timestamp with time zone NOT NULL DEFAULT now()
column workers.task_names text[]
column workers.concurrency_min integer
column workers.concurrency_max integer
column workers.concurrency_wanted integer
column workflow_incidents.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column workflow_incidents.kind text NOT NULL
column workflow_incidents.workflow_id bigint
column workflow_incidents.job_id bigint NOT NULL
column workflow_incidents.step text
column workflow_incidents.detail text NOT NULL
column workflow_incidents.sqlstate text
column workflow_incidents.occurrences integer NOT NULL DEFAULT 1
column workflow_incidents.first_at timestamp with time zone NOT NULL DEFAULT now()
column workflow_incidents.last_at timestamp with time zone NOT NULL DEFAULT now()
column workflows.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column workflows.kind text NOT NULL
column workflows.created_at timestamp with time zone NOT NULL DEFAULT now()
column workflows.on_error jsonb
column workflows.error_job_id bigint
column workflows.shape text
constraint audit_log.audit_log_pkey PRIMARY KEY (id)
constraint instance.instance_pkey PRIMARY KEY (singleton)
constraint instance.instance_singleton_check CHECK (singleton)
constraint instance.instance_store_no_check CHECK (((store_no >= 0) AND (store_no <= 32766)))
constraint job_events.job_events_pkey PRIMARY KEY (id)
constraint job_keys.job_keys_pkey PRIMARY KEY (job_id)
constraint job_steps.job_steps_pkey PRIMARY KEY (job_id, name, occurrence)
constraint job_waits.job_waits_pkey PRIMARY KEY (job_id)
constraint jobs.jobs_attempts_check CHECK (((attempts >= 0) AND (attempts <= max_attempts)))
constraint jobs.jobs_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs.jobs_limit_groups_check CHECK (((limit_groups IS NULL) OR (cardinality(limit_groups) <= 8))) NOT VALID
constraint jobs.jobs_max_attempts_check CHECK ((max_attempts >= 1))
constraint jobs.jobs_meta_check CHECK ((jsonb_typeof(meta) = 'object'::text))
constraint jobs.jobs_pkey PRIMARY KEY (id)
constraint jobs.jobs_sequence_job_inserted TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs.jobs_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'done'::text, 'failed'::text, 'cancelled'::text])))
constraint jobs.jobs_unique_window_check CHECK (((unique_window IS NULL) OR ((unique_key IS NOT NULL) AND (NOT isempty(unique_window)))))
constraint jobs_history.jobs_history_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs_history_done.jobs_history_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs_history_done_default.jobs_history_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs_history_failed.jobs_history_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint jobs_history_failed_default.jobs_history_forget_key TRIGGER DEFERRABLE INITIALLY DEFERRED
constraint limits.limits_burst_check CHECK ((burst >= (1)::double precision))
constraint limits.limits_burst_range_check CHECK (((burst >= (1)::double precision) AND (burst <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_concurrency_check CHECK (((concurrency IS NULL) OR (concurrency >= 0)))
constraint limits.limits_pkey PRIMARY KEY (name)
constraint limits.limits_rate_count_check CHECK (((rate_count IS NULL) OR (rate_count >= 1)))
constraint limits.limits_rate_period_check CHECK (((rate_period IS NULL) OR (rate_period > (0)::double precision)))
constraint limits.limits_rate_period_range_check CHECK (((rate_period IS NULL) OR ((rate_period >= (0.001)::double precision) AND (rate_period <= ('10000000000'::numeric)::double precision))))
constraint limits.limits_refilled_at_check CHECK (isfinite(refilled_at))
constraint limits.limits_tokens_check CHECK (((tokens >= (0)::double precision) AND (tokens <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_updated_at_check CHECK (isfinite(updated_at))
constraint migration_steps.migration_steps_pkey PRIMARY KEY (version, step)
constraint migrations.migrations_pkey PRIMARY KEY (version)
constraint notify_gates.notify_gates_pkey PRIMARY KEY (queue)
constraint periodic.periodic_pkey PRIMARY KEY (name)
constraint queue_pauses.queue_pauses_pkey PRIMARY KEY (queue)
constraint sequence_holds.sequence_holds_pkey PRIMARY KEY (sequence_key)
constraint worker_history.worker_history_pkey PRIMARY KEY (worker_id)
constraint workers.workers_pkey PRIMARY KEY (id)
constraint workflow_incidents.workflow_incidents_job_kind_key UNIQUE (job_id, kind)
constraint workflow_incidents.workflow_incidents_kind_check CHECK ((kind = ANY (ARRAY['tolerated'::text, 'healed'::text, 'unhealable'::text])))
constraint workflow_incidents.workflow_incidents_pkey PRIMARY KEY (id)
constraint workflows.workflows_kind_check CHECK ((kind = ANY (ARRAY['chain'::text, 'group'::text, 'chord'::text])))
constraint workflows.workflows_pkey PRIMARY KEY (id)
index CREATE UNIQUE INDEX audit_log_pkey ON {schema}.audit_log USING btree (id)
index CREATE INDEX audit_log_target_idx ON {schema}.audit_log USING btree (target, id)
index CREATE UNIQUE INDEX instance_pkey ON {schema}.instance USING btree (singleton)
index CREATE INDEX job_events_created_idx ON {schema}.job_events USING btree (created_at)
index CREATE INDEX job_events_key_idx ON {schema}.job_events USING btree (key, id)
index CREATE UNIQUE INDEX job_events_pkey ON {schema}.job_events USING btree (id)
index CREATE UNIQUE INDEX job_keys_idempotency_key ON {schema}.job_keys USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)
index CREATE UNIQUE INDEX job_keys_pkey ON {schema}.job_keys USING btree (job_id)
index CREATE UNIQUE INDEX job_keys_unique_window ON {schema}.job_keys USING btree (unique_key, unique_window) WHERE (unique_window IS NOT NULL)
index CREATE UNIQUE INDEX job_steps_pkey ON {schema}.job_steps USING btree (job_id, name, occurrence)
index CREATE INDEX job_waits_key_idx ON {schema}.job_waits USING btree (key)
index CREATE UNIQUE INDEX job_waits_pkey ON {schema}.job_waits USING btree (job_id)
index CREATE INDEX jobs_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) INCLUDE (queue) WHERE (status = 'pending'::text)
index CREATE INDEX jobs_debounce_idx ON {schema}.jobs USING btree (task_name, (((meta -> 'pgtasks.debounce'::text) ->> 'key'::text))) WHERE ((status = 'pending'::text) AND (attempts = 0) AND (meta ? 'pgtasks.debounce'::text))
index CREATE INDEX jobs_expiry_idx ON {schema}.jobs USING btree (run_at) WHERE ((status = 'pending'::text) AND (meta ? 'pgtasks.expires'::text))
index CREATE INDEX jobs_fair_claim_idx ON {schema}.jobs USING btree (priority DESC, {schema}.fair_rank(meta) NULLS FIRST, run_at, id) WHERE ((status = 'pending'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_fair_key_idx ON {schema}.jobs USING btree (((meta ->> 'pgtasks.fair_key'::text)), {schema}.fair_rank(meta) DESC) WHERE ((status = 'pending'::text) AND (meta ? 'pgtasks.fair_key'::text))
index CREATE INDEX jobs_finished_idx ON {schema}.jobs USING btree (finished_at) WHERE (status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text]))
index CREATE INDEX jobs_history_done_default_finished_at_idx ON {schema}.jobs_history_done_default USING btree (finished_at)
index CREATE INDEX jobs_history_done_default_id_idx ON {schema}.jobs_history_done_default USING btree (id)
index CREATE INDEX jobs_history_done_default_id_idx1 ON {schema}.jobs_history_done_default USING btree (id) WHERE ((idempotency_key IS NOT NULL) OR (unique_window IS NOT NULL))
index CREATE INDEX jobs_history_done_default_locked_by_finished_at_idx ON {schema}.jobs_history_done_default USING btree (locked_by, finished_at)
index CREATE INDEX jobs_history_done_default_workflow_id_id_idx ON {schema}.jobs_history_done_default USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_history_done_finished_at_idx ON ONLY {schema}.jobs_history_done USING btree (finished_at)
index CREATE INDEX jobs_history_done_id_idx ON ONLY {schema}.jobs_history_done USING btree (id)
index CREATE INDEX jobs_history_done_id_idx1 ON ONLY {schema}.jobs_history_done USING btree (id) WHERE ((idempotency_key IS NOT NULL) OR (unique_window IS NOT NULL))
index CREATE INDEX jobs_history_done_locked_by_finished_at_idx ON ONLY {schema}.jobs_history_done USING btree (locked_by, finished_at)
index CREATE INDEX jobs_history_done_workflow_id_id_idx ON ONLY {schema}.jobs_history_done USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_history_failed_default_finished_at_idx ON {schema}.jobs_history_failed_default USING btree (finished_at)
index CREATE INDEX jobs_history_failed_default_id_idx ON {schema}.jobs_history_failed_default USING btree (id)
index CREATE INDEX jobs_history_failed_default_id_idx1 ON {schema}.jobs_history_failed_default USING btree (id) WHERE ((idempotency_key IS NOT NULL) OR (unique_window IS NOT NULL))
index CREATE INDEX jobs_history_failed_default_locked_by_finished_at_idx ON {schema}.jobs_history_failed_default USING btree (locked_by, finished_at)
index CREATE INDEX jobs_history_failed_default_workflow_id_id_idx ON {schema}.jobs_history_failed_default USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_history_failed_finished_at_idx ON ONLY {schema}.jobs_history_failed USING btree (finished_at)
index CREATE INDEX jobs_history_failed_id_idx ON ONLY {schema}.jobs_history_failed USING btree (id)
index CREATE INDEX jobs_history_failed_id_idx1 ON ONLY {schema}.jobs_history_failed USING btree (id) WHERE ((idempotency_key IS NOT NULL) OR (unique_window IS NOT NULL))
index CREATE INDEX jobs_history_failed_locked_by_finished_at_idx ON ONLY {schema}.jobs_history_failed USING btree (locked_by, finished_at)
index CREATE INDEX jobs_history_failed_workflow_id_id_idx ON ONLY {schema}.jobs_history_failed USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_history_finished_idx ON ONLY {schema}.jobs_history USING btree (finished_at)
index CREATE INDEX jobs_history_id_idx ON ONLY {schema}.jobs_history USING btree (id)
index CREATE INDEX jobs_history_keyed_idx ON ONLY {schema}.jobs_history USING btree (id) WHERE ((idempotency_key IS NOT NULL) OR (unique_window IS NOT NULL))
index CREATE INDEX jobs_history_worker_idx ON ONLY {schema}.jobs_history USING btree (locked_by, finished_at)
index CREATE INDEX jobs_history_workflow_idx ON ONLY {schema}.jobs_history USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE UNIQUE INDEX jobs_idempotency_key_key ON {schema}.jobs USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)
index CREATE INDEX jobs_limited_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) WHERE ((status = 'pending'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_limited_running_idx ON {schema}.jobs USING btree (id) WHERE ((status = 'running'::text) AND (limit_groups <> ARRAY[]::text[]))
index CREATE INDEX jobs_parked_idx ON {schema}.jobs USING btree (queue, (((meta -> 'pgtasks.parked'::text) ->> 'kind'::text))) WHERE ((status = 'pending'::text) AND (meta ? 'pgtasks.parked'::text))
index CREATE UNIQUE INDEX jobs_pkey ON {schema}.jobs USING btree (id)
index CREATE INDEX jobs_running_idx ON {schema}.jobs USING btree (locked_by) WHERE (status = 'running'::text)
index CREATE INDEX jobs_sequence_head_idx ON {schema}.jobs USING btree ({schema}.sequence_key(meta)) WHERE ((meta ? 'pgtasks.sequence'::text) AND (status = ANY (ARRAY['pending'::text, 'running'::text])))
index CREATE INDEX jobs_sequence_idx ON {schema}.jobs USING btree ({schema}.sequence_key(meta), id) WHERE ((meta ? 'pgtasks.sequence'::text) AND (status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX jobs_unique_active_idx ON {schema}.jobs USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_window IS NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX jobs_unique_window_idx ON {schema}.jobs USING btree (unique_key, unique_window) WHERE (unique_window IS NOT NULL)
index CREATE INDEX jobs_waiting_idx ON {schema}.jobs USING btree (queue) WHERE (status = 'waiting'::text)
index CREATE INDEX jobs_workflow_idx ON {schema}.jobs USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_workflow_unfinished_idx ON {schema}.jobs USING btree (workflow_id) WHERE ((workflow_id IS NOT NULL) AND (status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX limits_pkey ON {schema}.limits USING btree (name)
index CREATE UNIQUE INDEX migration_steps_pkey ON {schema}.migration_steps USING btree (version, step)
index CREATE UNIQUE INDEX migrations_pkey ON {schema}.migrations USING btree (version)
index CREATE UNIQUE INDEX notify_gates_pkey ON {schema}.notify_gates USING btree (queue)
index CREATE UNIQUE INDEX periodic_pkey ON {schema}.periodic USING btree (name)
index CREATE UNIQUE INDEX queue_pauses_pkey ON {schema}.queue_pauses USING btree (queue)
index CREATE UNIQUE INDEX sequence_holds_pkey ON {schema}.sequence_holds USING btree (sequence_key)
index CREATE UNIQUE INDEX worker_history_pkey ON {schema}.worker_history USING btree (worker_id)
index CREATE INDEX worker_history_removed_at_idx ON {schema}.worker_history USING btree (removed_at)
index CREATE UNIQUE INDEX workers_pkey ON {schema}.workers USING btree (id)
index CREATE UNIQUE INDEX workflow_incidents_job_kind_key ON {schema}.workflow_incidents USING btree (job_id, kind)
index CREATE INDEX workflow_incidents_last_at_idx ON {schema}.workflow_incidents USING btree (last_at)
index CREATE UNIQUE INDEX workflow_incidents_pkey ON {schema}.workflow_incidents USING btree (id)
index CREATE UNIQUE INDEX workflows_pkey ON {schema}.workflows USING btree (id)
storage jobs fillfactor=80, autovacuum_vacuum_scale_factor=0.02, autovacuum_analyze_scale_factor=0.02
storage periodic fillfactor=50
trigger CREATE TRIGGER jobs_count_deduplicated AFTER UPDATE OF idempotency_key, unique_key ON {schema}.jobs FOR EACH ROW WHEN (((NOT (old.idempotency_key IS DISTINCT FROM new.idempotency_key)) AND (NOT (old.unique_key IS DISTINCT FROM new.unique_key)))) EXECUTE FUNCTION {schema}.count_deduplicated_enqueue()
trigger CREATE CONSTRAINT TRIGGER jobs_forget_key AFTER DELETE ON {schema}.jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_keyed_job_inserted AFTER INSERT ON {schema}.jobs FOR EACH ROW WHEN (((new.meta ? 'pgtasks.fair_key'::text) OR (new.meta ? 'pgtasks.sequence'::text))) EXECUTE FUNCTION {schema}.keyed_job_inserted()
trigger CREATE TRIGGER jobs_move_finished AFTER UPDATE OF status ON {schema}.jobs FOR EACH ROW WHEN ((new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text]))) EXECUTE FUNCTION {schema}.move_finished_job()
trigger CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS inserted_jobs FOR EACH STATEMENT WHEN ((current_setting('pgtasks.self_notified'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION {schema}.notify_jobs_inserted()
trigger CREATE TRIGGER jobs_register_key AFTER INSERT ON {schema}.jobs FOR EACH ROW WHEN (((new.idempotency_key IS NOT NULL) OR (new.unique_window IS NOT NULL))) EXECUTE FUNCTION {schema}.register_job_key()
trigger CREATE TRIGGER jobs_relative_deadlines AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS inserted_jobs FOR EACH STATEMENT WHEN ((current_setting('pgtasks.deadlines_stamped'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION {schema}.relative_deadlines_inserted()
trigger CREATE TRIGGER jobs_runtime_limits AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS inserted_jobs FOR EACH STATEMENT EXECUTE FUNCTION {schema}.runtime_limits_inserted()
trigger CREATE CONSTRAINT TRIGGER jobs_sequence_job_inserted AFTER INSERT ON {schema}.jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((new.workflow_id IS NULL) AND (new.meta ? 'pgtasks.sequence'::text))) EXECUTE FUNCTION {schema}.sequence_job_inserted()
trigger CREATE CONSTRAINT TRIGGER jobs_history_forget_key AFTER DELETE ON {schema}.jobs_history DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_history_sequence_job_ended AFTER INSERT ON {schema}.jobs_history FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (COALESCE(new.status, ''::text) <> ALL (ARRAY['done'::text, 'cancelled'::text])) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ended()
trigger CREATE TRIGGER jobs_history_sequence_job_ending BEFORE INSERT ON {schema}.jobs_history FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ending()
trigger CREATE TRIGGER jobs_history_sequence_jobs_ended AFTER INSERT ON {schema}.jobs_history FOR EACH STATEMENT WHEN ((COALESCE(current_setting('pgtasks.sequence_ending'::text, true), ''::text) = 'on'::text)) EXECUTE FUNCTION {schema}.sequence_jobs_ended()
trigger CREATE TRIGGER jobs_history_workflow_job_ended BEFORE INSERT ON {schema}.jobs_history FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE TRIGGER jobs_history_workflow_jobs_ended AFTER INSERT ON {schema}.jobs_history FOR EACH STATEMENT WHEN ((COALESCE(current_setting('pgtasks.workflow_ended'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION {schema}.workflow_jobs_ended()
trigger CREATE CONSTRAINT TRIGGER jobs_history_forget_key AFTER DELETE ON {schema}.jobs_history_done DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_history_sequence_job_ended AFTER INSERT ON {schema}.jobs_history_done FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (COALESCE(new.status, ''::text) <> ALL (ARRAY['done'::text, 'cancelled'::text])) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ended()
trigger CREATE TRIGGER jobs_history_sequence_job_ending BEFORE INSERT ON {schema}.jobs_history_done FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ending()
trigger CREATE TRIGGER jobs_history_workflow_job_ended BEFORE INSERT ON {schema}.jobs_history_done FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE CONSTRAINT TRIGGER jobs_history_forget_key AFTER DELETE ON {schema}.jobs_history_done_default DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_history_sequence_job_ended AFTER INSERT ON {schema}.jobs_history_done_default FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (COALESCE(new.status, ''::text) <> ALL (ARRAY['done'::text, 'cancelled'::text])) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ended()
trigger CREATE TRIGGER jobs_history_sequence_job_ending BEFORE INSERT ON {schema}.jobs_history_done_default FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ending()
trigger CREATE TRIGGER jobs_history_workflow_job_ended BEFORE INSERT ON {schema}.jobs_history_done_default FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE CONSTRAINT TRIGGER jobs_history_forget_key AFTER DELETE ON {schema}.jobs_history_failed DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_history_sequence_job_ended AFTER INSERT ON {schema}.jobs_history_failed FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (COALESCE(new.status, ''::text) <> ALL (ARRAY['done'::text, 'cancelled'::text])) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ended()
trigger CREATE TRIGGER jobs_history_sequence_job_ending BEFORE INSERT ON {schema}.jobs_history_failed FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ending()
trigger CREATE TRIGGER jobs_history_workflow_job_ended BEFORE INSERT ON {schema}.jobs_history_failed FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE CONSTRAINT TRIGGER jobs_history_forget_key AFTER DELETE ON {schema}.jobs_history_failed_default DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((((old.idempotency_key IS NOT NULL) OR (old.unique_window IS NOT NULL)) AND (current_setting('pgtasks.keys_handled'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.forget_job_key()
trigger CREATE TRIGGER jobs_history_sequence_job_ended AFTER INSERT ON {schema}.jobs_history_failed_default FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (COALESCE(new.status, ''::text) <> ALL (ARRAY['done'::text, 'cancelled'::text])) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ended()
trigger CREATE TRIGGER jobs_history_sequence_job_ending BEFORE INSERT ON {schema}.jobs_history_failed_default FOR EACH ROW WHEN (((new.meta ? 'pgtasks.sequence'::text) AND (new.workflow_id IS NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.sequence_job_ending()
trigger CREATE TRIGGER jobs_history_workflow_job_ended BEFORE INSERT ON {schema}.jobs_history_failed_default FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (current_setting('pgtasks.archiving'::text, true) IS DISTINCT FROM 'on'::text))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE TRIGGER workers_record_removed AFTER DELETE ON {schema}.workers REFERENCING OLD TABLE AS removed_workers FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_removed_workers()
statistics jobs.jobs_queue_status_stats (m) ON queue, status
statistics jobs_history.jobs_history_queue_status_stats (m) ON queue, status
function claim_limited() 1269fd19b70d0238ed4c5b4787389a55
function count_deduplicated_enqueue() 1a4e88b289767491b74cc7eff842bf34
function fair_rank() 12c0b71dac3a0a2d54ee497fd173084e
function forget_job_key() 594fe7c6dba47f6124c9c2a6ce68a7c5
function job_steps_of_meta() 4e0d8e26a67b8d5c2736f35f6f283e8a
function job_steps_taken() 79190a2dec5df29f562a70324d755cf3
function jobs_delete_finished() fba10730102f9ad3208aef84ea4ca94a
function jobs_history_create_days() dedd22508bc53bb4644570e7ec532f5c
function jobs_history_drop_day() 21bb88b14310d010219f0bafb630c1d0
function jobs_history_expired_days() 45249fefc222df9532d287e1d09c14de
function jobs_history_forget_day_keys() 37a69316c83aaaa2b304cfa301d69547
function jobs_refinish() 78cd0ac739987c9e7ef5d45b887c8d07
function jobs_restore() 34210936ae8bd8603c79382c2b1bc309
function jobs_retry() 68997493a6b27ff0c67041d14a2b7b7d
function keyed_job_inserted() 85feb279da538b650379614197d73471
function move_finished_job() 3d9f21207ceafae2306680eeb6da6d9a
function notify_gate_open() 591c32c175a7217acce5ff8b51ee6280
function notify_jobs_inserted() d475aca2db2bb1c80f5853a155e44e39
function record_removed_workers() 2fd7e0646ed6ae3ca7a59ef936d10f05
function register_job_key() 8dd5689cc36503eb5160f1c335004362
function relative_deadlines_inserted() c99ec052c1f502dd9110c0819d895658
function runtime_limits_inserted() f6ee57906589007d52e1bba0d7f709ec
function sequence_advance() 56160402aea9f0c585b53138993d630c
function sequence_advance_many() c5198c9ea6da3ab42059864b9f63b2ce
function sequence_hand_over() eab8556eb548ca01c5ac167398b11414
function sequence_handed_jobs() 9fe48d8a6ca2d6013e6f74f78c01c5e1
function sequence_job_ended() 960c077a43f68138194a69e6af5a2ad9
function sequence_job_ending() cc3ed9bbdbbd0f1a91c689b78d0122e0
function sequence_job_inserted() 1a82f80585905aa66d5e384c669c2414
function sequence_jobs_ended() 9bb0417e7bc11e87d4b98a77905ef94b
function sequence_key() d34fef9334c02f42ea144b52b02de7c4
function sequence_sweep() d1a254b5b369d7697093c69bb8bf2a35
function with_absolute_deadline() 2cd9aa139189624a985dc14769438fd0
function workflow_abort_reason() 208b90ca51774d27d8b9af0a7740220e
function workflow_cancel_downstream() b21651f2eda9aac40c1faceaa0347870
function workflow_heal_step() ddd7208eb042acc4598e899aca93e7f8
function workflow_incident() 1c8be421da437723736fba24795c9525
function workflow_input() adcb61cb117693cdcf575bbd1a02916e
function workflow_job_ended() 2f0bb678b937a596604b2e2d314103af
function workflow_jobs() a33439ad564037e7c3696be43ce49330
function workflow_jobs_ended() c9572907aa766728e58a92237d3f0374
function workflow_lock_targets() d03c4c9069dc3dcd93d9cab699f9c089
function workflow_move_on() 036562fa19c5cd29e153eda5a868b79a
function workflow_retry_step() 52ff4431623a3b1fea8daa7a8ec99584
function workflow_start() 3e27f6f07bb25d57536f39b3bc2cbee3
function workflow_start_on_error() 93aaf893b6c0e109715bfb69039a4af8
function workflow_start_ready() 78d48431237e8308d8166db45a95d7e4
function workflow_targets() 6fee836bb47ede87cf30d236ddc4ace6
