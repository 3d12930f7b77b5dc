"""Small study configurations shared by tests (importable by name: ``tests`` is on pytest's pythonpath)."""

#: the ASR A/B study (``asrsched.abtest.asr_fleet.ASRStudyConfig``) at the size of notebook 06's browser run:
#: two replicas, 2,500 requests, three replications, seconds per study
TINY_ASR_STUDY = dict(
    workloads=("librispeech",),
    n_replicas=2,
    rho=0.9,
    n_requests=2500,
    warmup_s=5.0,
    block_s=10.0,
    burn_in_s=2.0,
    sb_burn_ins=(0.0, 2.0),
    L=150,
    L_factors=(0.5, 1.0),
    n_batches=10,
    alpha_batches=20,
    reps=3,
    truth_seeds=2,
)
