"""The engine side: :class:`~devmem.EngineMemory` (:mod:`.memory`) over snapshots and profile windows
(:mod:`.profiling`, :mod:`.segment_history`), the KV allocation (:mod:`.kvcache`), ranks agreeing
(:mod:`.distributed`), a black-box cache's block cost (:mod:`.block_cost`), measured profiles kept on disk
(:mod:`.profile_store`) and the host's per-device reservations (:mod:`.reservations`)."""
