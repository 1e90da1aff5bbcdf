"""Tools that measure through the runner: ``lampe-eval fit`` (:mod:`.fit`, LaMPE's mapping-length sweep and
sigmoid) and ``lampe-eval dpe-select`` (:mod:`.dpe_select`, DPE's search for its factors).

Their probes are ordinary jobs (:mod:`.common`): records with provenance and engine identity in
``OUT/records.jsonl``, resumed like ``run``, on any backend; each tool reads its records back from the
store and computes its result from them.
"""
