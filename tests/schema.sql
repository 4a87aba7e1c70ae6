-- Normalised description of a migrated pgtasks schema ({schema} = its name).
-- Regenerate with: python3 scripts/dump-schema
column counters.name text NOT NULL
column counters.value bigint NOT NULL
column instance.singleton boolean NOT NULL DEFAULT true
column instance.store_no integer NOT NULL DEFAULT 0
column instance.uid uuid NOT NULL DEFAULT gen_random_uuid()
column instance.created_at timestamp with time zone NOT NULL DEFAULT now()
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
column limits.name text NOT NULL
column limits.concurrency integer
column limits.rate_count integer
column limits.rate_period double precision
column limits.burst double precision NOT NULL DEFAULT 1
column limits.tokens double precision NOT NULL DEFAULT 1
column limits.refilled_at timestamp with time zone NOT NULL DEFAULT now()
column limits.updated_at timestamp with time zone NOT NULL DEFAULT now()
column migration_steps.version integer NOT NULL
column migration_steps.step integer NOT NULL
column migration_steps.applied_at timestamp with time zone NOT NULL DEFAULT now()
column migrations.version integer NOT NULL
column migrations.name text NOT NULL
column migrations.applied_at timestamp with time zone NOT NULL DEFAULT now()
column periodic.name text NOT NULL
column periodic.processed_until timestamp with time zone NOT NULL
column periodic.last_tick timestamp with time zone
column periodic.last_job_id bigint
column periodic.created_at timestamp with time zone NOT NULL DEFAULT now()
column periodic.updated_at timestamp with time zone NOT NULL DEFAULT now()
column queue_pauses.queue text NOT NULL
column queue_pauses.paused_at timestamp with time zone NOT NULL DEFAULT now()
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
constraint instance.instance_pkey PRIMARY KEY (singleton)
constraint instance.instance_singleton_check CHECK (singleton)
constraint instance.instance_store_no_check CHECK (((store_no >= 0) AND (store_no <= 32766)))
constraint jobs.jobs_attempts_check CHECK (((attempts >= 0) AND (attempts <= max_attempts)))
constraint jobs.jobs_limit_groups_check CHECK (((limit_groups IS NULL) OR (cardinality(limit_groups) <= 8))) NOT VALID
constraint jobs.jobs_max_attempts_check CHECK ((max_attempts >= 1))
constraint jobs.jobs_meta_check CHECK ((jsonb_typeof(meta) = 'object'::text))
constraint jobs.jobs_pkey PRIMARY KEY (id)
constraint jobs.jobs_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'done'::text, 'failed'::text, 'cancelled'::text])))
constraint jobs.jobs_unique_window_check CHECK (((unique_window IS NULL) OR ((unique_key IS NOT NULL) AND (NOT isempty(unique_window)))))
constraint limits.limits_burst_check CHECK ((burst >= (1)::double precision))
constraint limits.limits_burst_range_check CHECK (((burst >= (1)::double precision) AND (burst <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_concurrency_check CHECK (((concurrency IS NULL) OR (concurrency >= 1)))
constraint limits.limits_pkey PRIMARY KEY (name)
constraint limits.limits_rate_count_check CHECK (((rate_count IS NULL) OR (rate_count >= 1)))
constraint limits.limits_rate_period_check CHECK (((rate_period IS NULL) OR (rate_period > (0)::double precision)))
constraint limits.limits_rate_period_range_check CHECK (((rate_period IS NULL) OR ((rate_period >= (0.001)::double precision) AND (rate_period <= ('10000000000'::numeric)::double precision))))
constraint limits.limits_refilled_at_check CHECK (isfinite(refilled_at))
constraint limits.limits_tokens_check CHECK (((tokens >= (0)::double precision) AND (tokens <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_updated_at_check CHECK (isfinite(updated_at))
constraint migration_steps.migration_steps_pkey PRIMARY KEY (version, step)
constraint migrations.migrations_pkey PRIMARY KEY (version)
constraint periodic.periodic_pkey PRIMARY KEY (name)
constraint queue_pauses.queue_pauses_pkey PRIMARY KEY (queue)
constraint worker_history.worker_history_pkey PRIMARY KEY (worker_id)
constraint workers.workers_pkey PRIMARY KEY (id)
constraint workflow_incidents.workflow_incidents_job_kind_key UNIQUE (job_id, kind)
constraint workflow_incidents.workflow_incidents_kind_check CHECK ((kind = ANY (ARRAY['tolerated'::text, 'healed'::text, 'unhealable'::text])))
constraint workflow_incidents.workflow_incidents_pkey PRIMARY KEY (id)
constraint workflows.workflows_kind_check CHECK ((kind = ANY (ARRAY['chain'::text, 'group'::text, 'chord'::text])))
constraint workflows.workflows_pkey PRIMARY KEY (id)
index CREATE UNIQUE INDEX instance_pkey ON {schema}.instance USING btree (singleton)
index CREATE INDEX jobs_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) WHERE (status = 'pending'::text)
index CREATE INDEX jobs_finished_idx ON {schema}.jobs USING btree (finished_at) WHERE (status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text]))
index CREATE UNIQUE INDEX jobs_idempotency_key_key ON {schema}.jobs USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)
index CREATE INDEX jobs_limited_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) WHERE ((status = 'pending'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_limited_running_idx ON {schema}.jobs USING btree (id) WHERE ((status = 'running'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_pending_queue_idx ON {schema}.jobs USING btree (queue, run_at) WHERE ((status = 'pending'::text) AND (attempts >= 0))
index CREATE UNIQUE INDEX jobs_pkey ON {schema}.jobs USING btree (id)
index CREATE INDEX jobs_running_idx ON {schema}.jobs USING btree (locked_by) WHERE (status = 'running'::text)
index CREATE UNIQUE INDEX jobs_unique_active_idx ON {schema}.jobs USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_window IS NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX jobs_unique_window_idx ON {schema}.jobs USING btree (unique_key, unique_window) WHERE (unique_window IS NOT NULL)
index CREATE INDEX jobs_waiting_idx ON {schema}.jobs USING btree (queue) WHERE (status = 'waiting'::text)
index CREATE INDEX jobs_workflow_idx ON {schema}.jobs USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE INDEX jobs_workflow_unfinished_idx ON {schema}.jobs USING btree (workflow_id) WHERE ((workflow_id IS NOT NULL) AND (status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX limits_pkey ON {schema}.limits USING btree (name)
index CREATE UNIQUE INDEX migration_steps_pkey ON {schema}.migration_steps USING btree (version, step)
index CREATE UNIQUE INDEX migrations_pkey ON {schema}.migrations USING btree (version)
index CREATE UNIQUE INDEX periodic_pkey ON {schema}.periodic USING btree (name)
index CREATE UNIQUE INDEX queue_pauses_pkey ON {schema}.queue_pauses USING btree (queue)
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
trigger CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS inserted_jobs FOR EACH STATEMENT WHEN ((current_setting('pgtasks.self_notified'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION {schema}.notify_jobs_inserted()
trigger CREATE TRIGGER jobs_workflow_job_ended AFTER UPDATE OF status ON {schema}.jobs FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE TRIGGER jobs_workflow_jobs_ended AFTER UPDATE OF status ON {schema}.jobs FOR EACH STATEMENT EXECUTE FUNCTION {schema}.workflow_jobs_ended()
trigger CREATE TRIGGER workers_record_removed AFTER DELETE ON {schema}.workers REFERENCING OLD TABLE AS removed_workers FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_removed_workers()
statistics jobs.jobs_queue_status_stats (m) ON queue, status
function claim_limited() cddda0e7b81d4b84b0be35ded98cfc96
function claim_limited_jobs() 47feec3114fd275a4935e4cbaecd5489
function count_deduplicated_enqueue() 1a4e88b289767491b74cc7eff842bf34
function notify_jobs_inserted() d475aca2db2bb1c80f5853a155e44e39
function record_removed_workers() 2fd7e0646ed6ae3ca7a59ef936d10f05
function workflow_abort_reason() d472420a56a6d1bb15f412f3f352df28
function workflow_cancel_downstream() 12766d509c3e69fbe494ac8f7308a977
function workflow_heal_step() 5ffb8ef374db26fb9dd9b759c8b7c8c6
function workflow_incident() 850aaf1fcf8528aa6a68ce0faf2dc11c
function workflow_input() 45328620f3f22e074e514e8b8ea144c7
function workflow_job_ended() 170ad8f4c9d8d1eecfa900b0713fa90c
function workflow_jobs_ended() c9572907aa766728e58a92237d3f0374
function workflow_lock_targets() afae7588c98c34b9e89be9346d65e01f
function workflow_move_on() 7c4b391d8456aad68c6301b7f17b1cb2
function workflow_retry_step() 7d96325662186a0de164fb10b627d9b4
function workflow_start() cc0b49450afb6e37169d456c5f52c8c0
function workflow_start_on_error() f59491197c34e27bd22c8c014757aad8
function workflow_start_ready() bb452a4bdf4c978df2bffbd8c2313a1b
function workflow_targets() 840a3716d9893da985b39fa7e9dd6b3b
